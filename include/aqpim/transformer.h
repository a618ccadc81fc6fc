#pragma once
// The Llama-family forward pass: RMSNorm, RoPE (interleaved or NeoX pairs, optional frequency
// scaling), GQA attention through a KvCache, SwiGLU FFN, optional QKV bias, tied or untied output.
// One call runs a batch of sequences, each with any number of new tokens (prefill rows and decode
// steps mix freely); projections of all rows go through one matmul per weight.

#include <cstdint>
#include <span>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/model.h"
#include "aqpim/workspace.h"

namespace aqpim {

/// The new tokens of one sequence in a step, placed after what the cache holds for it.
struct BatchSequence {
    int seq_id = 0;
    std::span<const std::int32_t> tokens;
    /// Logits for every row (perplexity), else for the last row only; the last row's are the same
    /// either way (computed in one product with the other sequences' last rows).
    bool all_logits = false;
};

/// Bytes one forward call read, for achieved-bandwidth reports.
struct ForwardTraffic {
    std::uint64_t weight_bytes = 0;  ///< weight matrices and vectors streamed (once per call)
    std::uint64_t kv_bytes = 0;      ///< KV cache bytes attended over
};

class Transformer {
public:
    /// `weights` must outlive the Transformer.
    explicit Transformer(const ModelWeights& weights, int n_threads = 0);

    const ModelConfig& config() const { return weights_.config; }
    KvShape kv_shape() const;

    /// Run one step. logits gets, for each sequence in order, n_vocab floats per requested row
    /// (all rows or the last): [rows][n_vocab]. Every token id must be < n_vocab.
    ForwardTraffic forward(std::span<const BatchSequence> batch, KvCache& cache, std::vector<float>& logits);

    /// Batch-invariant products (every row through the matvec kernel): each row of a call computes exactly what
    /// it computes alone, whatever else the batch holds (slower for large prefill batches).
    void set_batch_invariant(bool on) { batch_invariant_ = on; }

    /// Bytes a single-token decode step streams from the weights.
    std::uint64_t decode_weight_bytes() const;

    /// Heap bytes of the scratch its threads keep between steps (a Workspace per thread: the
    /// attention's tiles, tables and accumulators, the products' packed weight panels and prepared
    /// activations; grown to the largest step seen, never shrunk).
    std::size_t scratch_bytes() const;

private:
    void attention_block(int il, std::span<const BatchSequence> batch, KvCache& cache, std::int64_t n);
    void ffn_block(int il, std::int64_t n);
    void apply_rope(float* x, int n_heads, std::int64_t n) const;
    /// Y = X W^T through matmul or matmul_batch_invariant.
    void product(const WeightMatrix& W, const float* X, std::int64_t n, float* Y);

    const ModelWeights& weights_;
    int n_threads_;
    bool batch_invariant_ = false;
    std::vector<double> inv_freq_;    ///< [head_dim/2] rotation frequency of each pair
    // Scratch for the rows of one call.
    std::vector<std::int64_t> pos_;   ///< [n] position of each row
    std::vector<float> rope_cos_, rope_sin_;  ///< [n][head_dim/2]
    std::vector<float> x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_;
    ThreadWorkspaces workspaces_;  ///< each thread's scratch (attention, products)
};

/// The KV shape a model's caches need: layers, KV heads, head_dim, RoPE pair layout and frequencies.
KvShape kv_shape_of(const ModelWeights& weights);

/// Per-pair RoPE frequencies of a model: theta^(-2i/head_dim), then its scaling (llama3 rule,
/// linear, per-frequency factors from the file).
std::vector<double> rope_inverse_frequencies(const ModelWeights& weights);

}  // namespace aqpim
