// Decompress + cuBLAS baseline (see decompress_fallback.h).
#ifndef AQPIM_CUDA_NO_CUBLAS

#include "cuda/decompress_fallback.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/attention_common.cuh"
#include "cuda/cuda_check.h"

#define AQPIM_CUBLAS(call)                                                                              \
    do {                                                                                                \
        const cublasStatus_t st_ = (call);                                                              \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                               \
            ::aqpim::cuda::throw_failure(#call, __FILE__, __LINE__, "cuBLAS status " + std::to_string(int(st_))); \
    } while (0)

namespace aqpim::cuda {

namespace {

/// Rows [0, n_coded) decoded from codes, rows [n_coded, n_coded + n_f16) copied from the f16
/// buffer, the rest zero. Grid (row blocks of 32, n_kv_heads, batch), 128 threads.
__global__ void decompress_kernel(PqAttentionParams p, std::int64_t rows_cap, std::uint16_t* k16, std::uint16_t* v16) {
    const int kv = blockIdx.y, b = blockIdx.z, D = p.shape.D;
    const std::int64_t r0 = std::int64_t(blockIdx.x) * kBlockTokens;
    const int n_coded = p.n_coded[b], n_f16 = p.n_f16[b];
    const std::int64_t out_base = (std::int64_t(b) * p.shape.n_kv_heads + kv) * rows_cap * D;
    const std::int64_t f16_base = (std::int64_t(b) * p.shape.n_kv_heads + kv) * p.max_f16 * D;
    for (int idx = threadIdx.x; idx < kBlockTokens * D; idx += blockDim.x) {
        const std::int64_t row = r0 + idx / D;
        const int y = idx % D;
        if (row >= rows_cap) continue;
        if (row < n_coded) {
            const std::int64_t pt = std::int64_t(b) * p.max_pages + row / p.page_tokens;
            const std::int64_t cs = codebook_slot(p, b, p.page_version[pt], kv);
            const int in_page = int(row % p.page_tokens), t = in_page % kBlockTokens, blk = in_page / kBlockTokens;
            const std::uint8_t* page = p.pool + p.page_offset[pt];
            for (int values = 0; values < 2; ++values) {
                const int M = values ? p.Mv : p.Mk;
                const PqCodebookView cb = codebook_view(p, cs, values);
                const std::uint8_t* block = page + (values ? p.v_stream_off : p.k_stream_off)[kv] +
                                            std::int64_t(blk) * stream_block_bytes(p, values);
                const int code = block_code(block, p.nbits, t, y / (D / M));
                const float x = decoded_dim(cb, D / M, y, code);
                (values ? v16 : k16)[out_base + row * D + value_dim(cb, y)] = __half_as_ushort(__float2half_rn(x));
            }
        } else {
            const std::int64_t r = row - n_coded;
            const bool in = r < n_f16;
            k16[out_base + row * D + y] = in ? p.k16[f16_base + r * D + y] : 0;
            v16[out_base + row * D + y] = in ? p.v16[f16_base + r * D + y] : 0;
        }
    }
}

__global__ void queries_to_f16(const float* q, float scale, std::int64_t n, std::uint16_t* q16) {
    const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) q16[i] = __half_as_ushort(__float2half_rn(q[i] * scale));
}

/// p = softmax(scores) as f16, rows past n_coded + n_f16 weight 0. Grid (n_q, n_kv_heads, batch), 256 threads.
__global__ void softmax_rows(const float* scores, const int* n_coded, const int* n_f16, int n_kv_heads, int n_q,
                             std::int64_t rows_cap, std::uint16_t* p16) {
    const int h = blockIdx.x, kv = blockIdx.y, b = blockIdx.z;
    const std::int64_t base = ((std::int64_t(b) * n_kv_heads + kv) * n_q + h) * rows_cap;
    const std::int64_t n = n_coded[b] + n_f16[b];
    __shared__ float red[kWarps * 2];
    float m = kNegInf;
    for (std::int64_t t = threadIdx.x; t < n; t += blockDim.x) m = fmaxf(m, scores[base + t]);
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = kNegInf;
    for (int w = 0; w < int(blockDim.x) / 32; ++w) m = fmaxf(m, red[w]);
    float s = 0.0f;
    for (std::int64_t t = threadIdx.x; t < n; t += blockDim.x) s += hd_exp(scores[base + t] - m);
    s = warp_sum(s);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < int(blockDim.x) / 32; ++w) s += red[w];
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (std::int64_t t = threadIdx.x; t < rows_cap; t += blockDim.x)
        p16[base + t] = __half_as_ushort(__float2half_rn(t < n ? hd_exp(scores[base + t] - m) * inv : 0.0f));
}

}  // namespace

DecompressFallback::DecompressFallback(const AttentionShape& shape, std::int64_t max_rows)
    : shape_(shape), rows_cap_((max_rows + 7) / 8 * 8) {
    check_attention_shape(shape);
    const std::size_t streams = std::size_t(shape.batch) * shape.n_kv_heads;
    AQPIM_CUDA(cudaMalloc(&k16_, streams * rows_cap_ * shape.D * 2));
    AQPIM_CUDA(cudaMalloc(&v16_, streams * rows_cap_ * shape.D * 2));
    AQPIM_CUDA(cudaMalloc(&q16_, streams * shape.n_q * shape.D * 2));
    AQPIM_CUDA(cudaMalloc(&scores_, streams * shape.n_q * rows_cap_ * 4));
    AQPIM_CUDA(cudaMalloc(&p16_, streams * shape.n_q * rows_cap_ * 2));
    AQPIM_CUBLAS(cublasCreate(&handle_));
}

DecompressFallback::~DecompressFallback() {
    if (handle_) cublasDestroy(handle_);
    for (void* ptr : {static_cast<void*>(k16_), static_cast<void*>(v16_), static_cast<void*>(q16_),
                      static_cast<void*>(scores_), static_cast<void*>(p16_)})
        cudaFree(ptr);
}

void DecompressFallback::run(const PqAttentionParams& p, cudaStream_t stream) {
    check_pq_attention_params(p);
    const AttentionShape& s = shape_;
    AQPIM_CUDA_REQUIRE(p.shape.batch == s.batch && p.shape.n_kv_heads == s.n_kv_heads && p.shape.n_q == s.n_q && p.shape.D == s.D,
                       "the launch's shape differs from the fallback's scratch");
    AQPIM_CUDA_REQUIRE(!p.k_rot && !p.v_rot, "the decompress + cuBLAS fallback reads codebooks without a rotation");
    const int D = s.D, n_streams = s.batch * s.n_kv_heads;
    decompress_kernel<<<dim3(unsigned((rows_cap_ + kBlockTokens - 1) / kBlockTokens), s.n_kv_heads, s.batch), 128, 0,
                        stream>>>(p, rows_cap_, k16_, v16_);
    AQPIM_CUDA_LAUNCHED();
    const std::int64_t nq_total = std::int64_t(n_streams) * s.n_q * D;
    queries_to_f16<<<unsigned((nq_total + 255) / 256), 256, 0, stream>>>(p.q, s.scale, nq_total, q16_);
    AQPIM_CUDA_LAUNCHED();
    AQPIM_CUBLAS(cublasSetStream(handle_, stream));
    const float one = 1.0f, zero = 0.0f;
    // scores [n_q][rows] (column-major rows x n_q) = K^T (rows x D) . q (D x n_q)
    AQPIM_CUBLAS(cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(rows_cap_), s.n_q, D, &one, k16_,
                                            CUDA_R_16F, D, rows_cap_ * D, q16_, CUDA_R_16F, D,
                                            std::int64_t(s.n_q) * D, &zero, scores_, CUDA_R_32F, int(rows_cap_),
                                            std::int64_t(s.n_q) * rows_cap_, n_streams, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
    softmax_rows<<<dim3(s.n_q, s.n_kv_heads, s.batch), 256, 0, stream>>>(scores_, p.n_coded, p.n_f16, s.n_kv_heads, s.n_q,
                                                                   rows_cap_, p16_);
    AQPIM_CUDA_LAUNCHED();
    // out (column-major D x n_q) = V (D x rows) . p (rows x n_q)
    AQPIM_CUBLAS(cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, D, s.n_q, int(rows_cap_), &one, v16_,
                                            CUDA_R_16F, D, rows_cap_ * D, p16_, CUDA_R_16F, int(rows_cap_),
                                            std::int64_t(s.n_q) * rows_cap_, &zero, p.out, CUDA_R_32F, D,
                                            std::int64_t(s.n_q) * D, n_streams, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
}

std::uint64_t DecompressFallback::bytes_moved(const PqAttentionParams& p, std::int64_t rows) const {
    const std::uint64_t streams = std::uint64_t(shape_.batch) * shape_.n_kv_heads, D = shape_.D;
    const std::uint64_t codes =
        streams * rows * std::uint64_t(stream_block_bytes(p, false) + stream_block_bytes(p, true)) / kBlockTokens;
    const std::uint64_t rows_rw = streams * rows_cap_ * D * 2 * 2 * 2;  // K and V written, then read
    const std::uint64_t sp = streams * shape_.n_q * rows_cap_ * (4 * 2 + 2 * 2);  // scores w+r, p w+r
    return codes + rows_rw + sp;
}

}  // namespace aqpim::cuda

#endif  // AQPIM_CUDA_NO_CUBLAS
