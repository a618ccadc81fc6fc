// aqpim_cuda_check: the CUDA kernels' GPU checks and benchmark without the rest of aqpim (no fmt,
// CLI11, GTest or OpenBLAS), so a GPU machine builds it with nvcc and CMake alone
// (src/cuda/CMakeLists.txt; scripts/gpu-check.sh).
//
//   aqpim_cuda_check [--check] [--bench] [--quick] [--nbits 4|8]   (neither: both; --nbits: the benchmark's codes)
//   aqpim_cuda_check --profile                           one dense launch, one of each PQ value path and one 8-bit, batch 8, 32K, for ncu
//   --no-fallback: leave out the decompress + cuBLAS baseline (racecheck: cuBLAS's own kernels
//   report hazards of their own)

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cuda/cuda_bench.h"
#include "cuda/device_check.h"

namespace {

using namespace aqpim::cuda;

int run_checks(bool fallback) {
    int failed = 0, n = 0;
    // The PQ checks last, the mma path after the histogram path and the 8-bit kernel last: a fault
    // in a newer kernel (which spoils the CUDA context) loses no other group's results.
    std::vector<std::vector<DeviceCheck> (*)()> groups{check_dense_attention, check_encode};
    if (fallback) groups.push_back(check_decompress_fallback);
    groups.push_back([] { return check_pq_attention(PqValuePath::histogram); });
    groups.push_back([] { return check_pq_attention(PqValuePath::mma); });
    groups.push_back([] { return check_pq_attention(PqValuePath::mma_wide); });
    groups.push_back(check_pq_attention_8bit);
    for (auto group : groups) {
        std::vector<DeviceCheck> results;
        try {
            results = group();
        } catch (const std::exception& e) {
            ++n;
            ++failed;
            std::printf("FAIL  error: %s\n", e.what());
            continue;
        }
        for (const DeviceCheck& c : results) {
            ++n;
            failed += !c.passed();
            std::printf("%s  err %.3e  tol %.1e  %s\n", c.passed() ? "PASS" : "FAIL", c.error, c.tolerance, c.name.c_str());
        }
    }
    std::printf("checks: %d of %d passed\n", n - failed, n);
    return failed;
}

void run_bench(bool quick, bool fallback, int nbits) {
    CudaBenchOptions opt;
    opt.fallback = fallback;
    opt.nbits = nbits;
    if (quick) {  // the issue's target points
        opt.contexts = {32768, 131072};
        opt.batches = {8};
        opt.reps = 5;
    }
    const CudaBenchReport rep = run_cuda_bench(opt);
    const CudaDeviceFigures& f = rep.device;
    std::printf("\ndevice: %s, %d SMs, %.2f GHz, L2 %.0f MB; memory peak %.0f GB/s (reported), copy %.0f GB/s "
                "(measured); shared-memory peak %.0f GB/s\n",
                f.name.c_str(), f.sms, f.sm_clock_ghz, f.l2_mb, f.peak_gbps, f.copy_gbps, f.smem_peak_gbps);
    std::printf("%-10s %-20s %5s %7s %9s %10s %8s %7s %7s %9s %7s %9s\n", "section", "kernel", "batch", "context",
                "ms", "MB", "GB/s", "%peak", "%copy", "smemGB/s", "%smem", "vs_dense");
    for (const CudaBenchRow& r : rep.rows)
        std::printf("%-10s %-20s %5d %7d %9.4f %10.1f %8.1f %7.1f %7.1f %9.1f %7.1f %9.2f\n", r.section.c_str(),
                    r.kernel.c_str(), r.batch, r.context, r.ms, r.mbytes, r.gbps, r.pct_peak, r.pct_copy, r.smem_gbps,
                    r.pct_smem, r.vs_dense);
    std::printf("(encode rows: vs_dense = added %% of the PQ attention time; combine rows: %% of the dense time)\n");
}

}  // namespace

int main(int argc, char** argv) {
    bool check = false, bench = false, quick = false, profile = false, fallback = true;
    int nbits = 4;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--check"))
            check = true;
        else if (!std::strcmp(argv[i], "--bench"))
            bench = true;
        else if (!std::strcmp(argv[i], "--quick"))
            quick = true;
        else if (!std::strcmp(argv[i], "--profile"))
            profile = true;
        else if (!std::strcmp(argv[i], "--no-fallback"))
            fallback = false;
        else if (!std::strcmp(argv[i], "--nbits") && i + 1 < argc && (!std::strcmp(argv[i + 1], "4") || !std::strcmp(argv[i + 1], "8")))
            nbits = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: aqpim_cuda_check [--check] [--bench] [--quick] [--nbits 4|8] [--no-fallback] | --profile\n");
            return 2;
        }
    }
    if (!check && !bench && !profile) check = bench = true;
    const std::string why = cuda_device_unavailable();
    if (!why.empty()) {
        std::printf("skipped: %s\n", why.c_str());
        return 3;
    }
    try {
        if (profile) run_cuda_profile_launches(CudaBenchOptions{}, 8, 32768);
        const int failed = check ? run_checks(fallback) : 0;
        if (bench) run_bench(quick, fallback, nbits);
        return failed ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
