#pragma once
// The KV-cache interface of the runtime. A cache stores, per layer and per sequence, the keys
// (post-RoPE) and values of every token seen so far, and answers attention for the query rows of
// one sequence, one layer and one KV head at a time: one call serves the whole GQA group of that
// KV head (group = n_head / n_kv_head query heads) and any number of query rows (prefill), each
// row causally limited to the tokens at or before its position.
//
// Compressed caches (issue 4: PQ, int8/int4, KIVI, ...) implement the same interface; the dense
// f32 and f16 caches here are the reference they are measured against.
//
// Time consistency (what makes batched prefill and batched evaluation equal token-by-token
// decode): a query row at position p sees every token t <= p exactly as the cache would store it
// right after token p was appended one at a time. A scheme whose storage of a token changes over
// time (an f16 window that later gets quantized, codebooks trained once `calib` tokens exist)
// keeps what it needs to answer rows of the current step that way, and drops it at the next
// append; memory() reports the steady state (what a decode step holds), never less.
//
// Threading: append() is called for one layer at a time from one thread; attend() calls for
// different (sequence, KV head) pairs of the same layer run concurrently and must not race.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aqpim/rope_pairs.h"

namespace aqpim {

class Workspace;  // aqpim/workspace.h

class ByteWriter;  // aqpim/byte_io.h
class ByteReader;

struct KvShape {
    int n_layer = 0;
    int n_kv_head = 0;
    int head_dim = 0;
    /// Which key dims RoPE rotates together (the model's layout; PQ keeps each pair in one subspace).
    RopePairs rope_pairs = RopePairs::none;
    /// [head_dim/2] angle per position of each RoPE pair, scaling included (empty: unknown). The PQ
    /// cache rotates its calibration keys by these to cover the positions it will code later.
    std::vector<float> rope_inv_freq;
    /// K and V elements one token occupies over all layers.
    std::int64_t elements_per_token() const { return 2LL * n_layer * n_kv_head * head_dim; }
};

/// Every byte a cache holds for its tokens, by part ("keys f16", "codes", "codebooks", ...).
struct KvMemory {
    std::int64_t n_tokens = 0;  ///< tokens stored, summed over sequences
    std::uint64_t bytes = 0;    ///< sum of parts
    std::vector<std::pair<std::string, std::uint64_t>> parts;
    void add(const std::string& part, std::uint64_t n_bytes);
    /// bytes * 8 / (n_tokens * shape.elements_per_token()); 0 when empty.
    double bits_per_element(const KvShape& shape) const;
};

/// Query rows of one sequence for one layer and one KV head.
struct KvQuery {
    const float* q = nullptr;      ///< [n_rows][group][head_dim], row stride q_stride floats (post-RoPE)
    std::int64_t q_stride = 0;
    int n_rows = 0;
    int group = 1;                 ///< query heads served by this KV head
    const std::int64_t* pos = nullptr;  ///< [n_rows] row i attends to the tokens at positions 0..pos[i]
    float scale = 1.0f;            ///< scores are scale * q·k
    float* out = nullptr;          ///< [n_rows][group][head_dim], row stride out_stride floats
    std::int64_t out_stride = 0;
    /// The calling thread's scratch (aqpim/workspace.h), reused from call to call; null: the call
    /// allocates its own.
    Workspace* ws = nullptr;
};

/// A run of one sequence's stored tokens in one layer (for `aqpim run --trace`, docs/pimsim.md).
struct KvSpan {
    std::int64_t first = 0, n = 0;  ///< positions [first, first + n)
    int version = -1;               ///< codebook version that coded them; -1: kept uncoded (f16/f32/...)
    std::int64_t page = -1;         ///< code page index (-1: not in a code page)
};

class KvCache {
public:
    explicit KvCache(KvShape shape);
    virtual ~KvCache() = default;
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    const KvShape& shape() const { return shape_; }
    /// "f32", "f16", "pq:m=32,...": what `--kv` would say.
    virtual std::string scheme() const = 0;

    // ---- sequences -------------------------------------------------------------------------------
    /// Start an empty sequence (id >= 0, not in use, else aqpim::Error).
    virtual void add_sequence(int seq_id) = 0;
    /// End a sequence and release its memory (unknown id: aqpim::Error).
    virtual void remove_sequence(int seq_id) = 0;
    virtual bool has_sequence(int seq_id) const = 0;
    /// Tokens of the sequence stored in layer il (positions 0..n-1).
    virtual std::int64_t n_tokens(int seq_id, int il) const = 0;

    // ---- data ------------------------------------------------------------------------------------
    /// Append n tokens of layer il at positions n_tokens(seq_id, il) ..: k, v [n][n_kv_head][head_dim].
    virtual void append(int il, int seq_id, std::int64_t n, const float* k, const float* v) = 0;
    /// out = softmax(scale q·K^T) V over the sequence's tokens of layer il at positions <= pos[row]
    /// for KV head ih (pos[row] < n_tokens(seq_id, il), else aqpim::Error).
    virtual void attend(int il, int seq_id, int ih, const KvQuery& query) const = 0;

    /// What the cache holds now.
    virtual KvMemory memory() const = 0;
    /// Heap bytes of the scratch the cache keeps between calls (training rows, its encode tasks'
    /// buffers): not KV, so outside memory() and any KV budget; 0 for a cache that keeps none.
    virtual std::size_t scratch_bytes() const { return 0; }
    /// Steady-state bytes one more sequence of n_tokens tokens would occupy (what memory() would
    /// count for it after decoding that far, every overhead included): capacity planning
    /// (`aqpim info --budget`). Schemes that cannot tell throw aqpim::Error.
    virtual std::uint64_t sequence_bytes(std::int64_t n_tokens) const;
    /// How layer il of a sequence is stored, in position order. Default: every token as one uncoded span.
    virtual std::vector<KvSpan> layout(int seq_id, int il) const { return {KvSpan{0, n_tokens(seq_id, il), -1, -1}}; }

    // ---- state (save / restore one sequence: aqpim/kv_state.h, docs/kv-state.md) ------------------
    /// Append to `out` everything sequence seq_id holds, as the scheme's section of docs/kv-state.md
    /// lays it out: what continuing it exactly needs, nothing process-dependent. It reads as
    /// attend() does (concurrent attend() calls are fine, an append() is not). Default (a scheme
    /// that does not implement it): aqpim::Error "kv cache: scheme X cannot save its state".
    virtual void save_sequence(int seq_id, ByteWriter& out) const;
    /// Create sequence seq_id (not in use) from bytes save_sequence wrote in a cache of the same
    /// shape and scheme(), reading exactly those bytes from `in` (untrusted: every size is checked
    /// against the shape and the bytes left before anything is allocated). Afterwards memory() counts
    /// what it counted for the saved sequence and attend() answers its last position bit-identically.
    /// Bad bytes or a memory budget exceeded: aqpim::Error naming the field, and the cache is as it
    /// was. Default: aqpim::Error as save_sequence's.
    virtual void restore_sequence(int seq_id, ByteReader& in);

private:
    KvShape shape_;
};

enum class DenseKvType { f32, f16 };

/// The reference caches: keys and values stored as given (f32) or rounded to f16.
std::unique_ptr<KvCache> make_dense_kv_cache(const KvShape& shape, DenseKvType type);

}  // namespace aqpim
