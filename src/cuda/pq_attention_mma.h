#pragma once
// The tensor-core value path of the fused PQ attention (pq_attention_mma.cu), reached through
// launch_pq_attention(..., PqValuePath::mma) (pq_attention.h).

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/attention_params.h"

namespace aqpim::cuda {

/// Launch the kernel (partials only: the caller launches the combine). p is checked by the caller.
void launch_pq_mma_kernel(const PqAttentionParams& p, cudaStream_t stream);
std::size_t pq_mma_smem_bytes(const PqAttentionParams& p);
int pq_mma_blocks_per_sm(const PqAttentionParams& p);

}  // namespace aqpim::cuda
