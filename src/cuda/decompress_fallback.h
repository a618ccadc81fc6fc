#pragma once
// The seed's fallback, kept as a baseline: decompress every coded token to f16 rows in a scratch
// buffer (original space, the f16 sinks and window appended), then attention through cuBLAS:
// scores = K q (strided-batched GEMM, f16 in, f32 out), softmax, out = V^T p (GEMM).
// A standalone build that finds no cuBLAS defines AQPIM_CUDA_NO_CUBLAS (src/cuda/CMakeLists.txt):
// the fallback is then not compiled, and the check and the benchmark leave it out and say so.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/attention_params.h"

struct cublasContext;

namespace aqpim::cuda {

class DecompressFallback {
public:
    /// Scratch for batch x n_kv_heads streams of up to max_rows rows (coded + f16).
    DecompressFallback(const AttentionShape& shape, std::int64_t max_rows);
    ~DecompressFallback();
    DecompressFallback(const DecompressFallback&) = delete;
    DecompressFallback& operator=(const DecompressFallback&) = delete;

    /// p.out = attention over the decompressed rows (p.part_* unused).
    void run(const PqAttentionParams& p, cudaStream_t stream);
    /// Bytes the fallback moves through device memory per run (codes read, rows written and read
    /// back, scores and weights written and read), at the given rows per stream.
    std::uint64_t bytes_moved(const PqAttentionParams& p, std::int64_t rows) const;

private:
    AttentionShape shape_;
    std::int64_t rows_cap_;  ///< rows per stream, a multiple of 8
    std::uint16_t* k16_ = nullptr;  ///< [batch][n_kv_heads][rows_cap][D]
    std::uint16_t* v16_ = nullptr;
    std::uint16_t* q16_ = nullptr;  ///< [batch][n_kv_heads * n_q][D], scale folded in
    float* scores_ = nullptr;       ///< [batch][n_kv_heads][n_q][rows_cap]
    std::uint16_t* p16_ = nullptr;  ///< [batch][n_kv_heads][n_q][rows_cap]
    cublasContext* handle_ = nullptr;
};

}  // namespace aqpim::cuda
