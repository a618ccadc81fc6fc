// Final reduction of flash-decoding partials across chunks (shared by the PQ and dense kernels).

#include "cuda/attention_common.cuh"
#include "cuda/cuda_check.h"

namespace aqpim::cuda {

__global__ void combine_partials_kernel(int n_kv, int n_q, int D, int n_parts, const float* part_ml,
                                        const float* part_acc, float* out) {
    const int head = blockIdx.x, b = blockIdx.y, kv = head / n_q, h = head % n_q, d = threadIdx.x;
    const std::int64_t base = (std::int64_t(b) * n_kv + kv) * n_parts;
    float m = kNegInf, l = 0.0f, a = 0.0f;
    for (int c = 0; c < n_parts; ++c) {
        const std::int64_t slot = (base + c) * n_q + h;
        const MergeFactors f = merge_stats(m, l, part_ml[slot * 2], part_ml[slot * 2 + 1]);
        a = a * f.a + part_acc[slot * D + d] * f.b;
    }
    out[(std::int64_t(b) * n_kv * n_q + head) * D + d] = l > 0.0f ? a / l : 0.0f;
}

void launch_combine(const AttentionShape& shape, int n_parts, const float* part_ml, const float* part_acc, float* out,
                    cudaStream_t stream) {
    const dim3 grid(shape.n_kv * shape.n_q, shape.batch);
    combine_partials_kernel<<<grid, shape.D, 0, stream>>>(shape.n_kv, shape.n_q, shape.D, n_parts, part_ml, part_acc,
                                                          out);
    AQPIM_CUDA_LAUNCHED();
}

}  // namespace aqpim::cuda
