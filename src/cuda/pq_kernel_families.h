#pragma once
// The fused PQ attention kernels behind launch_pq_attention (pq_attention.cu): the 4-bit kernel
// with value histograms in shared memory (pq_attention.cu), its tensor-core value path
// (pq_attention_mma.cu) and the 8-bit kernel (pq_attention_8bit.cu). Each gives its launch (the
// partials only: the caller launches the combine; p is checked by the caller), its dynamic shared
// memory per block and its blocks per multiprocessor.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/attention_params.h"

namespace aqpim::cuda {

struct PqKernelFamily {
    void (*launch)(const PqAttentionParams& p, cudaStream_t stream);
    std::size_t (*smem_bytes)(const PqAttentionParams& p);
    int (*blocks_per_sm)(const PqAttentionParams& p);
};

/// The tensor-core value path built for `min_blocks` blocks per multiprocessor (3 or 4; GQA 8: 2).
PqKernelFamily pq_mma_family(int min_blocks);
PqKernelFamily pq_8bit_family();

}  // namespace aqpim::cuda
