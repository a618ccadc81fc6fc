#pragma once
// `aqpim bench cuda` and the standalone check's benchmark: PQ attention vs the dense f16
// flash-decoding kernel vs decompress + cuBLAS, over context and batch sweeps, and the cost of the
// encode step. Plain C++ interface (the command formats the rows).

#include <cstdint>
#include <string>
#include <vector>

namespace aqpim::cuda {

struct CudaBenchOptions {
    std::vector<int> contexts{8192, 32768, 131072};  ///< tokens per sequence (sinks + coded + window)
    std::vector<int> batches{1, 8, 32};
    int n_kv_heads = 8, n_q = 4, D = 128;  ///< Llama-3-8B-like layer: 32 query heads, 8 KV heads
    int M = 32;                      ///< subspaces of keys and values: 16 (4-bit) or 32 (8-bit) code bytes/token each
    int nbits = 4;                   ///< code width; 8: the 8-bit kernel (row "pq8"), no tensor-core path
    int page = 256, versions = 4, sinks = 4, window = 64;
    int reps = 10;                   ///< timed repetitions (median reported)
    bool fallback = true;            ///< also time decompress + cuBLAS
    std::uint64_t seed = 42;
};

struct CudaDeviceFigures {
    std::string name;
    int sms = 0;
    double sm_clock_ghz = 0;
    double peak_gbps = 0;       ///< from the memory clock and bus width the device reports
    double copy_gbps = 0;       ///< measured: device-to-device copy, bytes read + written
    double smem_peak_gbps = 0;  ///< 128 bytes per clock per SM
    double l2_mb = 0;
};

struct CudaBenchRow {
    std::string section;  ///< "attention", "combine" or "encode"
    std::string kernel;   ///< pq, pq_mma, pq8, dense_f16, decompress_cublas; encode, pq+encode (graph)
    int batch = 0, context = 0;
    double ms = 0;          ///< median kernel time (CUDA events; graph replay for pq and dense)
    double mbytes = 0;      ///< bytes that must move (each input read once), MB
    double gbps = 0;        ///< mbytes / ms
    double pct_peak = 0;    ///< of peak_gbps
    double pct_copy = 0;    ///< of copy_gbps
    double smem_gbps = 0;   ///< shared-memory bytes the PQ kernel moves, per second (counted, not profiled)
    double pct_smem = 0;    ///< of smem_peak_gbps
    double vs_dense = 0;    ///< dense_f16 time / this time (attention); % of the PQ attention time (encode) or
                            ///< of the dense time (combine)
};

struct CudaBenchReport {
    CudaDeviceFigures device;
    std::vector<CudaBenchRow> rows;
};

/// Runs the sweeps on device 0. Throws std::runtime_error when there is no usable GPU.
CudaBenchReport run_cuda_bench(const CudaBenchOptions& opt);

/// One plain launch (no graph, no timing) of the dense f16 kernel, then of each PQ value path (and,
/// for 4-bit options, of the 8-bit kernel), on the benchmark's problem of this batch and context:
/// what a profiler (ncu) is pointed at.
void run_cuda_profile_launches(const CudaBenchOptions& opt, int batch, int ctx);

}  // namespace aqpim::cuda
