#!/usr/bin/env bash
# The whole GoogleTest suite under AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer
# (clang-14, build-asan/; docs/reliability.md). A clean run is the bar: any report fails its test.
#   scripts/sanitize.sh [CTEST_ARGS...]      e.g. scripts/sanitize.sh -R Gguf
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

configure_sanitizer_build "$build"
nice -n 19 cmake --build "$build" -j "$AQPIM_BUILD_JOBS" --target aqpim_tests aqpim_cli
ctest --test-dir "$build" -j2 --output-on-failure "$@"
