#!/usr/bin/env bash
# One prepared run of the CUDA kernels on a lent H100/H200-class GPU machine (docs/cuda.md):
# builds aqpim_cuda_check with nvcc and CMake alone (that machine has none of this project's Debian
# libraries), runs the GPU checks, the benchmark, an Nsight Compute profile of one dense and one
# PQ launch (batch 8, 32K), the 8-bit kernel's benchmark, compute-sanitizer memcheck (and racecheck if time is left) on the
# checks, and writes a short report. Bounded to finish within 8 minutes.
#
#   scripts/gpu-check.sh [--quick]      from the repository root; results in $OUT (or gpu-check-out/)
#
# --quick: the benchmark's target points only (contexts 32K,128K; batch 8).
# GPU_CHECK_BUDGET_S: seconds the whole script may take (default 470).
set -uo pipefail

cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out"
report="$out/gpu-check.md"
bench_args=(--bench)
[[ ${1:-} == --quick ]] && bench_args+=(--quick)
export PATH="/usr/local/cuda/bin:$PATH"
t0=$(date +%s)
budget=${GPU_CHECK_BUDGET_S:-470}
left() { echo $((budget - ($(date +%s) - t0))); }  # seconds left of the budget
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
    { command -v nvcc cmake ninja; cmake --version | head -1; ls /usr/local/cuda/lib* 2>&1 | grep -i cublas; } >>"$out/build.log" 2>&1
    exit 1
fi
grep -E "Function properties|registers|spill" "$out/build.log" >"$out/ptxas.txt" || true

step checks 120 "$out/checks.log" build-gpu/aqpim_cuda_check --check
step bench "$(( $(left) > 200 ? $(left) - 140 : 60 ))" "$out/bench.log" build-gpu/aqpim_cuda_check "${bench_args[@]}"
if (($(left) > 160)); then  # the 8-bit kernel at the target points
    step bench8 90 "$out/bench8.log" build-gpu/aqpim_cuda_check --bench --quick --nbits 8
else
    echo "| bench8 | skipped: $(left)s left |  |" >>"$report"
fi
if command -v ncu >/dev/null && (($(left) > 130)); then
    step profile 90 "$out/profile.log" ncu --clock-control none -k 'regex:pq_attention_kernel|pq_attention_mma_kernel|pq_attention_8bit_kernel|dense_attention_kernel' \
        --set full build-gpu/aqpim_cuda_check --profile
else
    echo "| profile | skipped: $(command -v ncu >/dev/null && echo "$(left)s left" || echo "no ncu") |  |" >>"$report"
fi
step memcheck "$(( $(left) > 70 ? $(left) - 10 : 60 ))" "$out/memcheck.log" \
    compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/aqpim_cuda_check --check
if (($(left) > 60)); then
    step racecheck "$(( $(left) - 10 ))" "$out/racecheck.log" \
        compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/aqpim_cuda_check --check --no-fallback
else
    echo "| racecheck | skipped: $(left)s left |  |" >>"$report"
fi
if (($(left) > 40)); then
    step synccheck "$(( $(left) - 10 ))" "$out/synccheck.log" \
        compute-sanitizer --tool synccheck --error-exitcode 9 build-gpu/aqpim_cuda_check --check --no-fallback
else
    echo "| synccheck | skipped: $(left)s left |  |" >>"$report"
fi

{
    echo
    echo "## checks"
    echo '```'
    grep -E "^(PASS|FAIL)|^checks:|^skipped|^error" "$out/checks.log"
    echo '```'
    echo "## compute-sanitizer"
    echo '```'
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race|Barrier" "$out/memcheck.log" "$out/racecheck.log" \
        "$out/synccheck.log" 2>/dev/null | head -20
    echo '```'
    echo "## profile (ncu, batch 8, 32K): speed of light, shared memory, pipes"
    echo '```'
    grep -E "pq_attention_kernel|pq_attention_mma_kernel|pq_attention_8bit_kernel|dense_attention_kernel|Memory Throughput|DRAM Throughput|Duration|Compute \(SM\) Throughput|Shared|Bank|L1/TEX Hit|Issue Slots Busy|Executed Ipc Active|Achieved Occupancy|Registers Per|One or More Eligible|Stall|Pipe" "$out/profile.log" 2>/dev/null | head -160
    echo '```'
    echo "## benchmark"
    echo '```'
    grep -vE "^(PASS|FAIL)|^checks:" "$out/bench.log"
    echo '```'
    echo "## benchmark, 8-bit codes"
    echo '```'
    grep -vE "^(PASS|FAIL)|^checks:" "$out/bench8.log" 2>/dev/null
    echo '```'
    echo "total $(($(date +%s) - t0))s"
} >>"$report"
cat "$report"
exit $status
