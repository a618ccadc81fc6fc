#pragma once
// Real attention inputs for PQ experiments before the full runtime exists: the queries, keys and
// values of layer 0 of a Hugging Face Llama checkpoint (safetensors + config.json) for a token
// sequence. Layer 0's inputs depend only on the token embeddings, so this is exact:
//   h = RMSNorm(embed[token]) * input_layernorm;  q = Wq h, k = Wk h, v = Wv h;  RoPE on q, k.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "aqpim/pq.h"

namespace aqpim {

struct CapturedAttention {
    int n_tokens = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
    RopePairs rope_pairs = RopePairs::neox;  ///< HF checkpoints rotate halves (rotate_half)
    std::vector<float> q;  ///< [n_tokens][n_head][head_dim], post-RoPE
    std::vector<float> k;  ///< [n_tokens][n_kv_head][head_dim], post-RoPE
    std::vector<float> v;  ///< [n_tokens][n_kv_head][head_dim]

    /// Rows of one KV head, contiguous: [n_tokens][head_dim].
    std::vector<float> kv_head(const std::vector<float>& kv, int ih) const;
};

/// Capture layer 0 of the checkpoint in `model_dir` (config.json + model.safetensors) for `tokens`
/// at positions 0..n-1. Throws aqpim::Error on a missing/invalid file or out-of-range token id.
CapturedAttention capture_layer0(const std::string& model_dir, std::span<const std::int32_t> tokens);

/// Generated stand-in with the traits that matter for PQ: a few outlier key channels, low-rank
/// structure plus noise, RoPE applied by position (NeoX pairs). Deterministic for a seed.
CapturedAttention synthetic_attention(int n_tokens, int n_head, int n_kv_head, int head_dim, std::uint64_t seed);

/// Token ids from a JSON array file (as in ../shared/reference/tokens/*.ids).
std::vector<std::int32_t> read_token_ids(const std::string& path);

}  // namespace aqpim
