#pragma once
// What the scalar KV caches (row-quantized and KIVI) share: sequences of per-layer state, the memory
// budget, and attention over a head whose oldest tokens are quantized (decoded tile by tile into f32
// and fed to the dense kernels) and whose newest are f16, merged per query row.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"
#include "kv/kv_state_io.h"
#include "kv/scalar_codec.h"

namespace aqpim::kv {

// ---- segmented attention -------------------------------------------------------------------------

/// One (layer, sequence, KV head) as attention reads it: tokens [0, n_tokens); a quantized store
/// holding a prefix, and f16 rows for tokens [f16_start, n_tokens).
struct SegmentedHead {
    int head_dim = 0;
    std::int64_t n_tokens = 0;
    std::int64_t tile = 256;    ///< tokens decoded at once; tiles start at multiples of it
    std::int64_t window = 0;    ///< a row at p reads quantized the oldest floor(max(0, p + 1 - window) /
    std::int64_t granule = 1;   ///< granule) * granule tokens (at least f16_start, at most p + 1)
    std::int64_t f16_start = 0;
    std::int64_t coded_from = 0;  ///< a row at p with p + 1 < coded_from reads nothing quantized
    const f16_t* k16 = nullptr;  ///< [n_tokens - f16_start][head_dim]
    const f16_t* v16 = nullptr;  ///< [n_tokens - f16_start][head_dim]

    /// Tokens [0, quant_end(p)) a row at position p reads from the quantized store; [.., p] from f16.
    std::int64_t quant_end(std::int64_t p) const;
    /// Tokens quantized at steady state when n are stored (what a row at n - 1 reads quantized).
    std::int64_t quantized(std::int64_t n) const;
};

/// Decodes quantized tokens of one head.
class TileSource {
public:
    /// Tokens [t0, t0 + n) -> K, V [n][head_dim] f32 (t0 a multiple of the head's tile; the source may
    /// decode up to the next multiple of its granule, which the tile buffers leave room for).
    virtual void decode_tile(std::int64_t t0, std::int64_t n, float* K, float* V) const = 0;

protected:
    ~TileSource() = default;
};

/// out = softmax(scale q·K^T) V for every row of `query` (positions already checked < n_tokens): the
/// quantized prefix tile by tile, then the f16 rest, merged per row. A row's result depends only on
/// its position and the stored data, never on the other rows of the call (time consistency).
void attend_segmented(const SegmentedHead& head, const TileSource& source, const KvQuery& query);

/// Smallest multiple of granule that is >= 256: the tile of a cache decoding in blocks of granule tokens.
std::int64_t tile_for_granule(std::int64_t granule);

// ---- sequences, budget, attention dispatch ---------------------------------------------------------

/// Base of the scalar caches. LayerState holds one layer of one sequence (all KV heads) and has
/// `std::int64_t n_tokens` and `std::uint64_t bytes` (what memory() counts for it).
template <class LayerState>
class ScalarCacheBase : public KvCache {
public:
    /// fixed_bytes: what the cache holds whatever its sequences (tables shared by all of them),
    /// charged against the budget from the start.
    ScalarCacheBase(const KvShape& shape, const KvCacheOptions& options, std::uint64_t fixed_bytes = 0)
        : KvCache(shape), budget_(options.memory_budget), bytes_(fixed_bytes) {
        AQPIM_CHECK(budget_ == 0 || fixed_bytes <= budget_,
                    "kv cache: its shared tables need {} bytes, over the memory budget of {} bytes", fixed_bytes, budget_);
    }

    void add_sequence(int seq_id) override {
        AQPIM_CHECK(seq_id >= 0, "kv cache {}: sequence id {} must be non-negative", scheme(), seq_id);
        AQPIM_CHECK(!has_sequence(seq_id), "kv cache {}: sequence {} already exists", scheme(), seq_id);
        seqs_[seq_id].resize(shape().n_layer);
    }
    void remove_sequence(int seq_id) override {
        auto it = seqs_.find(seq_id);
        AQPIM_CHECK(it != seqs_.end(), "kv cache {}: no sequence {}", scheme(), seq_id);
        for (const LayerState& l : it->second) bytes_ -= l.bytes;
        seqs_.erase(it);
    }
    bool has_sequence(int seq_id) const override { return seqs_.count(seq_id) != 0; }
    std::int64_t n_tokens(int seq_id, int il) const override { return layer(seq_id, il).n_tokens; }

    void attend(int il, int seq_id, int ih, const KvQuery& query) const override {
        const LayerState& l = attended_layer(il, seq_id, ih, query);
        struct Source final : TileSource {
            const ScalarCacheBase* cache;
            const LayerState* l;
            int ih;
            Source(const ScalarCacheBase* c, const LayerState* s, int h) : cache(c), l(s), ih(h) {}
            void decode_tile(std::int64_t t0, std::int64_t n, float* K, float* V) const override {
                cache->decode_tile(*l, ih, t0, n, K, V);
            }
        } source(this, &l, ih);
        attend_segmented(head_view(l, ih), source, query);
    }

protected:
    /// The segments of KV head ih of a layer.
    virtual SegmentedHead head_view(const LayerState& l, int ih) const = 0;
    /// Quantized tokens [t0, t0 + n) of KV head ih -> K, V [n][head_dim] (see TileSource).
    virtual void decode_tile(const LayerState& l, int ih, std::int64_t t0, std::int64_t n, float* K,
                             float* V) const = 0;

    const LayerState& layer(int seq_id, int il) const {
        AQPIM_CHECK(il >= 0 && il < shape().n_layer, "kv cache {}: layer {} out of range [0, {})", scheme(), il,
                    shape().n_layer);
        auto it = seqs_.find(seq_id);
        AQPIM_CHECK(it != seqs_.end(), "kv cache {}: no sequence {}", scheme(), seq_id);
        return it->second[il];
    }
    LayerState& mutable_layer(int seq_id, int il) { return const_cast<LayerState&>(layer(seq_id, il)); }
    /// The layer an attend() call reads, after checking its KV head and every row's position.
    const LayerState& attended_layer(int il, int seq_id, int ih, const KvQuery& query) const {
        const LayerState& l = layer(seq_id, il);
        AQPIM_CHECK(ih >= 0 && ih < shape().n_kv_head, "kv cache {}: KV head {} out of range [0, {})", scheme(), ih,
                    shape().n_kv_head);
        for (int r = 0; r < query.n_rows; ++r)
            AQPIM_CHECK(query.pos[r] >= 0 && query.pos[r] < l.n_tokens,
                        "kv cache {}: query position {} but layer {} of sequence {} holds {} tokens", scheme(),
                        query.pos[r], il, seq_id, l.n_tokens);
        return l;
    }
    /// Append the head rows of KV head ih of n tokens (src [n][n_kv_head][head_dim]) to dst as f16.
    void append_f16_rows(const float* src, std::int64_t n, int ih, std::vector<f16_t>& dst) const {
        const int n_kv_heads = shape().n_kv_head, hd = shape().head_dim;
        const std::size_t old = dst.size();
        dst.resize(old + std::size_t(n) * hd);
        for (std::int64_t t = 0; t < n; ++t) f32_to_fp16(src + (t * n_kv_heads + ih) * hd, dst.data() + old + t * hd, std::size_t(hd));
    }

    /// Before appending n tokens to layer il of sequence seq_id: the layer will hold new_bytes. Beyond
    /// the budget this throws and nothing changes; else the accounting is updated.
    void charge(LayerState& l, std::uint64_t new_bytes, int il, int seq_id, std::int64_t n) {
        const std::uint64_t need = bytes_ - l.bytes + new_bytes;
        AQPIM_CHECK(budget_ == 0 || need <= budget_,
                    "kv cache {}: appending {} tokens to layer {} of sequence {} needs {} bytes in all, over the "
                    "memory budget of {} bytes (holding {} bytes now)",
                    scheme(), n, il, seq_id, need, budget_, bytes_);
        bytes_ = need;
        l.bytes = new_bytes;
    }

    /// The start of every restore_sequence: a free id, the layers' token counts (docs/kv-state.md),
    /// and the budget for the bytes they will hold (layer_bytes(n) per layer), checked before reading on.
    template <class LayerBytes>
    std::vector<std::int64_t> begin_restore(int seq_id, ByteReader& in, LayerBytes layer_bytes) const {
        check_new_sequence(*this, seq_id);
        std::vector<std::int64_t> n = read_layer_counts(in, shape());
        std::uint64_t bytes = 0;
        for (std::int64_t t : n) bytes += layer_bytes(t);
        check_restore_budget(bytes, seq_id);
        return n;
    }
    /// Before restoring a sequence that will hold `bytes`: beyond the budget this throws (nothing changes).
    void check_restore_budget(std::uint64_t bytes, int seq_id) const {
        AQPIM_CHECK(budget_ == 0 || bytes_ + bytes <= budget_,
                    "kv cache {}: restoring sequence {} needs {} bytes in all, over the memory budget of {} bytes "
                    "(holding {} bytes now)",
                    scheme(), seq_id, bytes_ + bytes, budget_, bytes_);
    }
    /// Restore: sequence seq_id (checked free) from its layer states, their `bytes` set.
    void insert_sequence(int seq_id, std::vector<LayerState> layers) {
        std::uint64_t b = 0;
        for (const LayerState& l : layers) b += l.bytes;
        check_restore_budget(b, seq_id);
        AQPIM_ASSERT(int(layers.size()) == shape().n_layer && !has_sequence(seq_id));
        seqs_.emplace(seq_id, std::move(layers));
        bytes_ += b;
    }

    /// Sequences -> [n_layer] layer states.
    const std::map<int, std::vector<LayerState>>& sequences() const { return seqs_; }
    /// Tokens stored, summed over sequences (layer 0's count, as the dense caches report).
    std::int64_t stored_tokens() const {
        std::int64_t n = 0;
        for (const auto& [id, layers] : seqs_) n += layers[0].n_tokens;
        return n;
    }
    /// Bytes held now (the fixed bytes plus every layer state's `bytes`).
    std::uint64_t held_bytes() const { return bytes_; }

private:
    std::uint64_t budget_ = 0;
    std::uint64_t bytes_ = 0;
    std::map<int, std::vector<LayerState>> seqs_;
};

// ---- the two caches --------------------------------------------------------------------------------

/// Row-quantized cache: every token's key and value head rows coded by `codec` on append. `scheme`
/// is what scheme() reports ("int4:g=32", "q4_0").
std::unique_ptr<KvCache> make_row_kv_cache(const std::string& scheme, const RowCodec& codec, const KvShape& shape,
                                           const KvCacheOptions& options);

}  // namespace aqpim::kv
