#pragma once
// Launchers of the CUDA PQ decode attention (pq_attention.cu), encode (pq_encode.cu) and the
// decompress + cuBLAS fallback (pq_decompress.cu). Parameters: attention_params.h.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/attention_params.h"

namespace aqpim::cuda {

/// How the fused PQ kernel adds up the values (docs/cuda.md): `histogram` keeps each warp's value
/// histograms in shared memory (f32 weights); `mma` keeps them in tensor-core accumulators (f32)
/// fed with f16 weights and one-hot codes built in registers; `mma_wide` is the same kernel built for
/// 3 blocks per multiprocessor instead of 4 (up to 168 registers a thread, no spills at GQA 4
/// instead of 128 with a few spilled): which is faster is for a GPU to say, so the benchmark runs both.
enum class PqValuePath { histogram, mma, mma_wide };
/// Either build of the tensor-core value path.
inline bool is_mma(PqValuePath path) { return path == PqValuePath::mma || path == PqValuePath::mma_wide; }
const char* to_string(PqValuePath path);

/// Fused PQ attention of every (sequence, KV head) and the reduction across chunks into p.out.
/// 8-bit codes (p.nbits == 8) run pq_attention_8bit.cu, with `path` histogram (the only one).
void launch_pq_attention(const PqAttentionParams& p, cudaStream_t stream, PqValuePath path = PqValuePath::histogram);
/// Dynamic shared memory one block of the PQ kernel takes.
std::size_t pq_attention_smem_bytes(const PqAttentionParams& p, PqValuePath path = PqValuePath::histogram);
/// Thread blocks of the PQ kernel one multiprocessor holds at once (shape, Mk, Mv of p).
int pq_attention_blocks_per_sm(const PqAttentionParams& p, PqValuePath path = PqValuePath::histogram);

/// Encode one new key and value per (sequence, KV head) at coded index n_coded[b] - 1 into its page
/// (the page's nibbles must be zero: pages are zeroed when handed out and a token is coded once).
/// k_new, v_new [batch][n_kv_heads][D] original space; pool is p.pool, writable.
void launch_pq_encode(const PqAttentionParams& p, const float* k_new, const float* v_new, std::uint8_t* pool,
                      cudaStream_t stream);

}  // namespace aqpim::cuda
