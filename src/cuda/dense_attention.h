#pragma once
// Launcher of the dense f16 flash-decoding baseline (dense_attention.cu).

#include <cuda_runtime_api.h>

#include "cuda/attention_params.h"

namespace aqpim::cuda {

/// Attention of every (sequence, KV head) over its f16 rows, chunks merged into p.out.
void launch_dense_attention(const DenseAttentionParams& p, cudaStream_t stream);
/// Thread blocks of the dense kernel one multiprocessor holds at once (sizes the split over the context).
int dense_attention_blocks_per_sm(const AttentionShape& shape);

}  // namespace aqpim::cuda
