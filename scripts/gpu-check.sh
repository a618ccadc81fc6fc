#!/usr/bin/env bash
# One prepared run of the CUDA kernels on a lent H100/H200-class GPU machine (docs/cuda.md):
# builds aqpim_cuda_check with nvcc and CMake alone (that machine has none of this project's Debian
# libraries), runs the GPU checks, compute-sanitizer memcheck (and racecheck if time is left) on
# them, and the benchmark, and writes a short report. Bounded to finish within 8 minutes.
#
#   scripts/gpu-check.sh [--quick]      from the repository root; results in $OUT (or gpu-check-out/)
#
# --quick: the benchmark's small sweep (contexts 8K,32K; batches 1,8).
set -uo pipefail

cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out"
report="$out/gpu-check.md"
bench_args=(--bench)
[[ ${1:-} == --quick ]] && bench_args+=(--quick)
export PATH="/usr/local/cuda/bin:$PATH"
t0=$(date +%s)
left() { echo $((470 - ($(date +%s) - t0))); }  # seconds left of a 7m50s budget
status=0

step() {  # step NAME LIMIT_S LOG CMD...: run with a time limit, record the outcome
    local name=$1 limit=$2 log=$3
    shift 3
    local ts rc
    ts=$(date +%s)
    timeout "$limit" "$@" >"$log" 2>&1
    rc=$?
    local dt=$(($(date +%s) - ts))
    case $rc in
        0) echo "| $name | ok | ${dt}s |" >>"$report" ;;
        124) echo "| $name | TIMED OUT after ${limit}s | ${dt}s |" >>"$report"; status=1 ;;
        3) echo "| $name | skipped: no GPU | ${dt}s |" >>"$report"; status=1 ;;
        *) echo "| $name | FAILED (exit $rc) | ${dt}s |" >>"$report"; status=1 ;;
    esac
    return $rc
}

{
    echo "# gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
    nvcc --version 2>&1 | tail -2
    echo '```'
    echo
    echo "| step | outcome | time |"
    echo "|---|---|---|"
} >"$report"

if ! step build 240 "$out/build.log" bash -c \
    "cmake -S src/cuda -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       -DCMAKE_CUDA_FLAGS='-Xptxas=-v' && cmake --build build-gpu -j $(nproc)"; then
    tail -40 "$out/build.log"
    exit 1
fi
grep -E "Function properties|registers|spill" "$out/build.log" >"$out/ptxas.txt" || true

step checks 120 "$out/checks.log" build-gpu/aqpim_cuda_check --check
step memcheck "$(( $(left) - 200 > 60 ? 150 : 60 ))" "$out/memcheck.log" \
    compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/aqpim_cuda_check --check
step bench "$(( $(left) - 30 ))" "$out/bench.log" build-gpu/aqpim_cuda_check "${bench_args[@]}"
if (($(left) > 90)); then
    step racecheck "$(( $(left) - 20 ))" "$out/racecheck.log" \
        compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/aqpim_cuda_check --check
else
    echo "| racecheck | skipped: $(left)s left |  |" >>"$report"
fi

{
    echo
    echo "## checks"
    echo '```'
    grep -E "^(PASS|FAIL)|^checks:|^skipped|^error" "$out/checks.log"
    echo '```'
    echo "## compute-sanitizer"
    echo '```'
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race" "$out/memcheck.log" "$out/racecheck.log" 2>/dev/null | head -20
    echo '```'
    echo "## benchmark"
    echo '```'
    grep -vE "^(PASS|FAIL)|^checks:" "$out/bench.log"
    echo '```'
    echo "total $(($(date +%s) - t0))s"
} >>"$report"
cat "$report"
exit $status
