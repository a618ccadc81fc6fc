// The row-quantized KV cache: per layer, sequence and KV head, keys and values as coded head rows
// [n_tokens][row_bytes] (int groups, Q8_0 or Q4_0 blocks: whatever the row codec says).

#include <fmt/format.h>

#include "kv/scalar_cache.h"

namespace aqpim::kv {

namespace {

struct RowLayer {
    std::int64_t n_tokens = 0;
    std::uint64_t bytes = 0;
    std::vector<std::vector<std::uint8_t>> k, v;  ///< [n_kv_head] of [n_tokens][codec.row_bytes()]
};

class RowKvCache final : public ScalarCacheBase<RowLayer> {
public:
    RowKvCache(std::string scheme, const RowCodec& codec, const KvShape& shape, const KvCacheOptions& options)
        : ScalarCacheBase(shape, options), scheme_(std::move(scheme)), codec_(codec) {
        AQPIM_ASSERT(codec.head_dim == shape.head_dim);
    }

    std::string scheme() const override { return scheme_; }

    void append(int il, int seq_id, std::int64_t n, const float* k, const float* v) override {
        AQPIM_CHECK(n >= 0, "kv cache {}: cannot append {} tokens", scheme_, n);
        RowLayer& l = mutable_layer(seq_id, il);
        const int n_kv_heads = shape().n_kv_head, hd = shape().head_dim;
        const std::size_t rb = codec_.row_bytes();
        charge(l, layer_bytes(l.n_tokens + n), il, seq_id, n);
        l.k.resize(n_kv_heads);
        l.v.resize(n_kv_heads);
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            for (auto [src, dst] : {std::pair{k, &l.k[ih]}, std::pair{v, &l.v[ih]}}) {
                dst->resize(std::size_t(l.n_tokens + n) * rb);
                codec_.encode(src + ih * hd, n, std::int64_t(n_kv_heads) * hd, dst->data() + std::size_t(l.n_tokens) * rb);
            }
        }
        l.n_tokens += n;
    }

    KvMemory memory() const override {
        std::uint64_t rows = 0;  // head rows of keys (= of values) over every layer and sequence
        for (const auto& [id, layers] : sequences())
            for (const RowLayer& l : layers) rows += std::uint64_t(l.n_tokens) * shape().n_kv_head;
        KvMemory m;
        m.n_tokens = stored_tokens();
        for (const char* kv : {"key", "value"}) {
            m.add(fmt::format("{} codes", kv), rows * codec_.code_bytes());
            m.add(fmt::format("{} scales f16", kv), rows * codec_.scale_bytes());
            if (codec_.min_bytes() != 0) m.add(fmt::format("{} mins f16", kv), rows * codec_.min_bytes());
        }
        AQPIM_ASSERT(m.bytes == held_bytes());
        return m;
    }

    std::uint64_t sequence_bytes(std::int64_t n_tokens) const override {
        const std::uint64_t rows = std::uint64_t(n_tokens) * shape().n_layer * shape().n_kv_head;
        return 2 * rows * (codec_.code_bytes() + codec_.scale_bytes() + codec_.min_bytes());
    }

    /// Section (docs/kv-state.md): layer counts, then per layer and KV head key rows and value rows
    /// [n][codec row bytes], as the codec stores them.
    void save_sequence(int seq_id, ByteWriter& out) const override {
        layer(seq_id, 0);  // validates
        write_layer_counts(out, *this, seq_id);
        for (const RowLayer& l : sequences().at(seq_id))
            for (std::size_t ih = 0; ih < l.k.size(); ++ih)
                for (const auto* rows : {&l.k[ih], &l.v[ih]}) out.bytes(rows->data(), rows->size());
    }

    void restore_sequence(int seq_id, ByteReader& in) override {
        const std::vector<std::int64_t> n = begin_restore(seq_id, in, [&](std::int64_t t) { return layer_bytes(t); });
        std::vector<RowLayer> layers(shape().n_layer);
        for (int il = 0; il < shape().n_layer; ++il) {
            RowLayer& l = layers[il];
            l.n_tokens = n[il];
            l.bytes = layer_bytes(l.n_tokens);
            l.k.resize(shape().n_kv_head);
            l.v.resize(shape().n_kv_head);
            for (int ih = 0; ih < shape().n_kv_head; ++ih)
                for (const bool value : {false, true}) {
                    const auto rows = in.bytes(std::uint64_t(l.n_tokens) * codec_.row_bytes(),
                                               fmt::format("layer {} KV head {} {} rows", il, ih, value ? "value" : "key"));
                    (value ? l.v : l.k)[ih].assign(rows.begin(), rows.end());
                }
        }
        insert_sequence(seq_id, std::move(layers));
    }

protected:
    SegmentedHead head_view(const RowLayer& l, int ih) const override {
        SegmentedHead h;
        h.head_dim = shape().head_dim;
        h.n_tokens = l.n_tokens;
        h.tile = tile_for_granule(1);
        h.f16_start = l.n_tokens;  // no f16 rows: every token is read from the codes
        return h;
    }

    void decode_tile(const RowLayer& l, int ih, std::int64_t t0, std::int64_t n, float* K, float* V) const override {
        const std::size_t off = std::size_t(t0) * codec_.row_bytes();
        codec_.decode(l.k[ih].data() + off, n, K);
        codec_.decode(l.v[ih].data() + off, n, V);
    }

private:
    std::uint64_t layer_bytes(std::int64_t n_tokens) const {
        return std::uint64_t(n_tokens) * shape().n_kv_head * 2 * codec_.row_bytes();
    }

    std::string scheme_;
    RowCodec codec_;
};

}  // namespace

std::unique_ptr<KvCache> make_row_kv_cache(const std::string& scheme, const RowCodec& codec, const KvShape& shape,
                                           const KvCacheOptions& options) {
    return std::make_unique<RowKvCache>(scheme, codec, shape, options);
}

}  // namespace aqpim::kv
