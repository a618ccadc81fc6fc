#pragma once
// Real attention inputs for PQ experiments: the queries, keys and values of layer 0 of a model
// (GGUF, safetensors directory or llama2.c checkpoint) for a token sequence, as the runtime's own
// prefill computes them (post-RoPE queries and keys, in the model's RoPE pair layout).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "aqpim/pq.h"

namespace aqpim {

struct CapturedAttention {
    int n_tokens = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
    RopePairs rope_pairs = RopePairs::neox;  ///< the model's (HF checkpoints: halves; GGUF, llama2.c: interleaved)
    std::vector<float> q;  ///< [n_tokens][n_head][head_dim], post-RoPE
    std::vector<float> k;  ///< [n_tokens][n_kv_head][head_dim], post-RoPE
    std::vector<float> v;  ///< [n_tokens][n_kv_head][head_dim]

    /// Rows of one KV head, contiguous: [n_tokens][head_dim].
    std::vector<float> kv_head(const std::vector<float>& kv, int ih) const;
};

/// Capture layer 0 of the model at `model_path` (anything load_model reads) for `tokens` at
/// positions 0..n-1. Throws aqpim::Error on a missing/invalid file or out-of-range token id.
CapturedAttention capture_layer0(const std::string& model_path, std::span<const std::int32_t> tokens);

/// Generated stand-in with the traits that matter for PQ: a few outlier key channels, low-rank
/// structure plus noise, RoPE applied by position (NeoX pairs). Deterministic for a seed.
CapturedAttention synthetic_attention(int n_tokens, int n_head, int n_kv_head, int head_dim, std::uint64_t seed);

/// Token ids from a JSON array file (as in ../shared/reference/tokens/*.ids).
std::vector<std::int32_t> read_token_ids(const std::string& path);

}  // namespace aqpim
