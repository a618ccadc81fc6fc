// Final reduction of flash-decoding partials across chunks (shared by the PQ and dense kernels).

#include "cuda/attention_common.cuh"
#include "cuda/cuda_check.h"

namespace aqpim::cuda {

__global__ void combine_partials_kernel(int n_kv_heads, int n_q, int D, int n_parts, const float* part_ml,
                                        const float* part_acc, float* out) {
    const int head = blockIdx.x, b = blockIdx.y, kv = head / n_q, h = head % n_q, d = threadIdx.x;
    out[(std::int64_t(b) * n_kv_heads * n_q + head) * D + d] =
        combine_element(part_ml, part_acc, n_q, D, n_parts, (std::int64_t(b) * n_kv_heads + kv) * n_parts, h, d);
}

void launch_combine(const AttentionShape& shape, int n_parts, const float* part_ml, const float* part_acc, float* out,
                    cudaStream_t stream) {
    const dim3 grid(shape.n_kv_heads * shape.n_q, shape.batch);
    combine_partials_kernel<<<grid, shape.D, 0, stream>>>(shape.n_kv_heads, shape.n_q, shape.D, n_parts, part_ml, part_acc,
                                                          out);
    AQPIM_CUDA_LAUNCHED();
}

}  // namespace aqpim::cuda
