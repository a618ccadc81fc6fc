// Dense f16 flash-decoding baseline: grid (n_chunks, n_kv_heads, batch), 4 warps per block; block
// (c, kv, b) attends rows [c * chunk_tokens, (c + 1) * chunk_tokens) of (b, kv) with the f16-row
// warp loop (16-byte cp.async copies, kDenseStages - 1 tiles of 4 KB per warp in flight), then
// launch_combine merges the chunks.

#include "cuda/attention_common.cuh"
#include "cuda/cuda_check.h"
#include "cuda/dense_attention.h"

namespace aqpim::cuda {

namespace {

constexpr int kDenseStages = 3;
constexpr std::size_t kDenseSmemBytes = std::size_t(kWarps) * kDenseStages * kF16StageBytes;

template <int NQ, int D>
__global__ void __launch_bounds__(kThreads) dense_attention_kernel(DenseAttentionParams p) {
    __shared__ BlockState<NQ, D> st;
    __shared__ float qs[NQ][D];
    extern __shared__ uint4 ring[];
    const int chunk = blockIdx.x, kv = blockIdx.y, b = blockIdx.z, n_q = p.shape.n_q, n_kv_heads = p.shape.n_kv_heads;
    block_state_init(st);
    load_scaled_queries(p.q + (std::int64_t(b) * n_kv_heads + kv) * n_q * D, n_q, p.shape.scale, qs);
    __syncthreads();
    const std::int64_t base = (std::int64_t(b) * n_kv_heads + kv) * p.max_tokens * D;
    const std::int64_t r0 = std::int64_t(chunk) * p.chunk_tokens;
    const std::int64_t r1 = min(r0 + p.chunk_tokens, std::int64_t(p.n_tokens[b]));
    attend_f16_rows<NQ, D, kDenseStages>(qs, p.k + base, p.v + base, r0, r1 > r0 ? r1 : r0, st,
                                         ring + (threadIdx.x >> 5) * (kDenseStages * kF16StageBytes / 16));
    block_merge_warps(st);
    write_partial(st, n_q, p.part_ml, p.part_acc, (std::int64_t(b) * n_kv_heads + kv) * p.n_chunks + chunk);
}

template <int NQ, int D>
void launch_dense_kernel(const DenseAttentionParams& p, cudaStream_t stream) {
    auto* kernel = dense_attention_kernel<NQ, D>;
    AQPIM_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kDenseSmemBytes)));
    kernel<<<dim3(p.n_chunks, p.shape.n_kv_heads, p.shape.batch), kThreads, kDenseSmemBytes, stream>>>(p);
    AQPIM_CUDA_LAUNCHED();
}

struct DenseLaunch {
    const DenseAttentionParams& p;
    cudaStream_t stream;
    template <int NQ, int D>
    void operator()() const { launch_dense_kernel<NQ, D>(p, stream); }
};

struct DenseOccupancy {
    int& blocks;
    template <int NQ, int D>
    void operator()() const {
        AQPIM_CUDA(cudaFuncSetAttribute(dense_attention_kernel<NQ, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(kDenseSmemBytes)));
        AQPIM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, dense_attention_kernel<NQ, D>, kThreads,
                                                                 kDenseSmemBytes));
    }
};

}  // namespace

int dense_attention_blocks_per_sm(const AttentionShape& shape) {
    check_attention_shape(shape);
    int blocks = 0;
    dispatch_instance(shape, DenseOccupancy{blocks});
    return blocks;
}

void launch_dense_attention(const DenseAttentionParams& p, cudaStream_t stream) {
    check_attention_shape(p.shape);
    AQPIM_CUDA_REQUIRE(p.chunk_tokens > 0 && p.n_chunks * std::int64_t(p.chunk_tokens) >= p.max_tokens,
                       "chunks must cover max_tokens");
    dispatch_instance(p.shape, DenseLaunch{p, stream});
    launch_combine(p.shape, p.n_chunks, p.part_ml, p.part_acc, p.out, stream);
}

}  // namespace aqpim::cuda
