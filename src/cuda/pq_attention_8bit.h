#pragma once
// The fused PQ attention over 8-bit codes (pq_attention_8bit.cu), reached through
// launch_pq_attention (pq_attention.h) when p.nbits == 8.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/attention_params.h"

namespace aqpim::cuda {

/// Launch the kernel (partials only: the caller launches the combine). p is checked by the caller.
void launch_pq_8bit_kernel(const PqAttentionParams& p, cudaStream_t stream);
std::size_t pq_8bit_smem_bytes(const PqAttentionParams& p);
int pq_8bit_blocks_per_sm(const PqAttentionParams& p);

}  // namespace aqpim::cuda
