#!/usr/bin/env bash
# The whole GoogleTest suite under AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer
# (clang-14, build-asan/; docs/reliability.md). A clean run is the bar: any report fails its test.
#   scripts/sanitize.sh [--fast] [CTEST_ARGS...]      e.g. scripts/sanitize.sh -R Gguf
# --fast (CI): without the tests listed in `slow` below, which take about two thirds of the suite's
# time under ASan (560 of 835 test-seconds) and add no code path the rest does not run.
# Suppressions, each with the reason it is not our bug, are in scripts/sanitizer-suppressions/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/sanitizer_build.sh

build=${AQPIM_ASAN_BUILD:-build-asan}
supp=$PWD/scripts/sanitizer-suppressions
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS="$UBSAN_OPTIONS:suppressions=$supp/ubsan.supp"
# One OpenMP thread per test process: 2 shared cores, and ctest runs two at a time.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# The tests over 7 s under ASan (build-asan/Testing/Temporary/CTestCostData.txt) that repeat, at
# larger sizes or over more settings, what smaller tests check of the same code: perplexity against
# llama.cpp on real models (Golden), 64 concurrent streams (HttpLoad), the CUDA kernels' CPU
# emulation over many problems (Cuda*), attention accuracy over context sweeps (PqKv, TurboKv),
# the budget solver's grid, the roofline's tables and validation, and matmul at every batch size.
# Every reader, parser, hostile-input, state-file and server-request test stays in.
slow='^(Golden|Cuda[A-Za-z0-9]*|ServeDeterminism)\.|^HttpLoad\.SixtyFour|^PqKv\.(AttentionStaysCloseToF16|BitsTargetHolds|CodesEqualDecodeThenDense|NothingUncounted)|^PqBudgetSolver\.ThePeak|^KvStateGenerate\.Austen13m|^TurboKv\.AttentionErrorByBitWidth|^Roofline(Cli\.TablesAndCsv|Validation)\.|^Matmul\.TheRowsPath'
subset=()
if [ "${1:-}" = --fast ]; then shift; subset=(-E "$slow"); fi

configure_sanitizer_build "$build"
# Everything the directory is configured for: the tests and the command, and with -DAQPIM_FUZZ=ON
# (scripts/fuzz.sh in the same directory, as CI does) the fuzz targets that FuzzRegression.* runs.
nice -n 19 cmake --build "$build" -j "$AQPIM_BUILD_JOBS"
ctest --test-dir "$build" -j2 --output-on-failure "${subset[@]}" "$@"
