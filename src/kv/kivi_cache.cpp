// The KIVI cache: per layer, sequence and KV head, keys as per-channel blocks of g tokens, values as
// per-token rows of g-channel groups, and f16 rows for the tokens not yet quantized.
//
// State at n tokens: the oldest Q(n) = floor(max(0, n - window) / g) * g tokens quantized, the rest
// f16. Tokens are quantized from their f16 rows (so a token is coded identically whether it was
// appended alone or in a batch). After an append of tokens [n0, n), the f16 rows of tokens
// [Q(n0 + 1), Q(n)) are kept as well until the next append: the rows of this step (positions n0..)
// must see those tokens in f16, as token-by-token decoding would.

#include "kv/kivi_cache.h"

#include <fmt/format.h>

#include "kv/scalar_cache.h"
#include "core/int_math.h"

namespace aqpim::kv {

std::int64_t kivi_quantized_tokens(std::int64_t n, const KiviParams& p) {
    return std::max<std::int64_t>(0, n - p.window) / p.g * p.g;
}

namespace {

struct KiviHead {
    std::vector<std::uint8_t> k_blocks;  ///< [n_quant / g][key block bytes] channels coded over g tokens
    std::vector<std::uint8_t> v_rows;    ///< [n_quant][value row bytes]
    std::vector<f16_t> k16, v16;         ///< [n_tokens - f16_start][head_dim]
};

struct KiviLayer {
    std::int64_t n_tokens = 0;
    std::uint64_t bytes = 0;
    std::int64_t n_quant = 0;    ///< kivi_quantized_tokens(n_tokens)
    std::int64_t f16_start = 0;  ///< first token with f16 rows: Q(first position of the last append + 1)
    std::vector<KiviHead> heads; ///< [n_kv_head]
};

class KiviKvCache final : public ScalarCacheBase<KiviLayer> {
public:
    KiviKvCache(const KiviParams& p, const KvShape& shape, const KvCacheOptions& options)
        : ScalarCacheBase(shape, options),
          p_(p),
          key_(AffineLayout{shape.head_dim, p.g, p.bits, 1, shape.head_dim}),
          value_(RowCodec::affine_groups(shape.head_dim, p.bits, p.g)) {}

    std::string scheme() const override { return fmt::format("kivi{}:g={},window={}", p_.bits, p_.g, p_.window); }

    void append(int il, int seq_id, std::int64_t n, const float* k, const float* v) override {
        AQPIM_CHECK(n >= 0, "kv cache {}: cannot append {} tokens", scheme(), n);
        KiviLayer& l = mutable_layer(seq_id, il);
        if (n == 0) return;
        const int n_kv_heads = shape().n_kv_head, hd = shape().head_dim, g = p_.g;
        const std::int64_t n_new = l.n_tokens + n, q_new = kivi_quantized_tokens(n_new, p_);
        const std::int64_t f16_new = kivi_quantized_tokens(l.n_tokens + 1, p_);
        charge(l, layer_bytes(n_new), il, seq_id, n);
        l.heads.resize(n_kv_heads);
        std::vector<float> rows(std::size_t(g) * hd);  // [g][hd] one group of tokens back in f32
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            KiviHead& h = l.heads[ih];
            append_f16_rows(k, n, ih, h.k16);
            append_f16_rows(v, n, ih, h.v16);
            h.k_blocks.resize(std::size_t(q_new / g) * key_.bytes());
            h.v_rows.resize(std::size_t(q_new) * value_.row_bytes());
            for (std::int64_t t0 = l.n_quant; t0 < q_new; t0 += g) {
                const std::size_t f16_off = std::size_t(t0 - l.f16_start) * hd;
                fp16_to_f32(h.k16.data() + f16_off, rows.data(), rows.size());
                affine_encode(key_, rows.data(), h.k_blocks.data() + std::size_t(t0 / g) * key_.bytes());
                fp16_to_f32(h.v16.data() + f16_off, rows.data(), rows.size());
                value_.encode(rows.data(), g, hd, h.v_rows.data() + std::size_t(t0) * value_.row_bytes());
            }
            const std::ptrdiff_t drop = (f16_new - l.f16_start) * hd;
            h.k16.erase(h.k16.begin(), h.k16.begin() + drop);
            h.v16.erase(h.v16.begin(), h.v16.begin() + drop);
        }
        l.n_tokens = n_new;
        l.n_quant = q_new;
        l.f16_start = f16_new;
    }

    KvMemory memory() const override {
        std::uint64_t quant = 0, f16_rows = 0;  // head rows over every layer and sequence
        for (const auto& [id, layers] : sequences())
            for (const KiviLayer& l : layers) {
                quant += std::uint64_t(l.n_quant) * shape().n_kv_head;
                f16_rows += std::uint64_t(l.n_tokens - l.n_quant) * shape().n_kv_head;
            }
        const std::uint64_t blocks = quant / p_.g, f16_bytes = f16_rows * shape().head_dim * sizeof(f16_t);
        KvMemory m;
        m.n_tokens = stored_tokens();
        m.add("key codes", blocks * key_.code_bytes());
        m.add("key scales f16", blocks * key_.scale_bytes());
        m.add("key mins f16", blocks * key_.min_bytes());
        m.add("value codes", quant * value_.code_bytes());
        m.add("value scales f16", quant * value_.scale_bytes());
        m.add("value mins f16", quant * value_.min_bytes());
        m.add("keys f16 window", f16_bytes);
        m.add("values f16 window", f16_bytes);
        AQPIM_ASSERT(m.bytes == held_bytes());
        return m;
    }

    std::uint64_t sequence_bytes(std::int64_t n_tokens) const override {
        const std::uint64_t heads = std::uint64_t(shape().n_layer) * shape().n_kv_head;
        const std::uint64_t quant = std::uint64_t(kivi_quantized_tokens(n_tokens, p_)) * heads;
        const std::uint64_t f16_rows = std::uint64_t(n_tokens) * heads - quant;
        const std::uint64_t blocks = quant / p_.g;
        return blocks * (key_.code_bytes() + key_.scale_bytes() + key_.min_bytes()) +
               quant * (value_.code_bytes() + value_.scale_bytes() + value_.min_bytes()) +
               2 * f16_rows * shape().head_dim * sizeof(f16_t);
    }

    /// Section (docs/kv-state.md): layer counts, then per layer and KV head (q = the tokens quantized
    /// at n): key blocks [q / g][key block bytes], value rows [q][value row bytes], f16 keys and values
    /// [n - q][head_dim] of the rest. Only the steady state is kept (the f16 rows of tokens quantized
    /// by the last append are not): the restored sequence answers its last position, as after a
    /// decode step.
    void save_sequence(int seq_id, ByteWriter& out) const override {
        layer(seq_id, 0);  // validates
        write_layer_counts(out, *this, seq_id);
        const std::size_t hd = std::size_t(shape().head_dim);
        for (const KiviLayer& l : sequences().at(seq_id))
            for (const KiviHead& h : l.heads) {
                out.bytes(h.k_blocks.data(), h.k_blocks.size());
                out.bytes(h.v_rows.data(), h.v_rows.size());
                const std::size_t skip = std::size_t(l.n_quant - l.f16_start) * hd;  // rows kept for the last step
                for (const auto* rows : {&h.k16, &h.v16}) out.u16s(rows->data() + skip, rows->size() - skip);
            }
    }

    void restore_sequence(int seq_id, ByteReader& in) override {
        const std::vector<std::int64_t> n = begin_restore(seq_id, in, [&](std::int64_t t) { return layer_bytes(t); });
        const std::uint64_t hd = std::uint64_t(shape().head_dim);
        std::vector<KiviLayer> layers(shape().n_layer);
        for (int il = 0; il < shape().n_layer; ++il) {
            KiviLayer& l = layers[il];
            l.n_tokens = n[il];
            l.n_quant = l.f16_start = kivi_quantized_tokens(l.n_tokens, p_);
            l.bytes = layer_bytes(l.n_tokens);
            l.heads.resize(shape().n_kv_head);
            for (int ih = 0; ih < shape().n_kv_head; ++ih) {
                KiviHead& h = l.heads[ih];
                const std::string at = fmt::format("layer {} KV head {}", il, ih);
                const auto kb = in.bytes(std::uint64_t(l.n_quant / p_.g) * key_.bytes(), at + " key blocks");
                h.k_blocks.assign(kb.begin(), kb.end());
                const auto vr = in.bytes(std::uint64_t(l.n_quant) * value_.row_bytes(), at + " value rows");
                h.v_rows.assign(vr.begin(), vr.end());
                const std::uint64_t f16_values = std::uint64_t(l.n_tokens - l.n_quant) * hd;
                for (auto [rows, what] : {std::pair{&h.k16, " f16 keys"}, std::pair{&h.v16, " f16 values"}}) {
                    in.require(f16_values, 2, at + what);
                    rows->resize(std::size_t(f16_values));
                    read_finite_f16(in, rows->data(), f16_values, at + what);
                }
            }
        }
        insert_sequence(seq_id, std::move(layers));
    }

protected:
    SegmentedHead head_view(const KiviLayer& l, int ih) const override {
        SegmentedHead h;
        h.head_dim = shape().head_dim;
        h.n_tokens = l.n_tokens;
        h.tile = tile_for_granule(p_.g);
        h.window = p_.window;
        h.granule = p_.g;
        h.f16_start = l.f16_start;
        h.k16 = l.heads[ih].k16.data();
        h.v16 = l.heads[ih].v16.data();
        return h;
    }

    void decode_tile(const KiviLayer& l, int ih, std::int64_t t0, std::int64_t n, float* K, float* V) const override {
        const int g = p_.g, hd = shape().head_dim;
        const std::int64_t n_blocks = ceil_div(n, g);  // whole key blocks (the tile leaves room)
        AQPIM_ASSERT(t0 % g == 0 && t0 + n_blocks * g <= l.n_quant);
        const KiviHead& h = l.heads[ih];
        for (std::int64_t b = 0; b < n_blocks; ++b)
            affine_decode(key_, h.k_blocks.data() + std::size_t(t0 / g + b) * key_.bytes(), K + b * g * hd);
        value_.decode(h.v_rows.data() + std::size_t(t0) * value_.row_bytes(), n, V);
    }

private:
    /// Bytes of one layer of one sequence at n tokens (all KV heads, steady state).
    std::uint64_t layer_bytes(std::int64_t n) const {
        const std::int64_t q = kivi_quantized_tokens(n, p_);
        const std::uint64_t per_head = std::uint64_t(q / p_.g) * key_.bytes() + std::uint64_t(q) * value_.row_bytes() +
                                       std::uint64_t(n - q) * shape().head_dim * 2 * sizeof(f16_t);
        return per_head * shape().n_kv_head;
    }

    KiviParams p_;
    AffineLayout key_;  ///< one key block: {head_dim, g, bits, 1, head_dim} over [g][head_dim] rows
    RowCodec value_;    ///< value rows: g-channel groups
};

}  // namespace

std::unique_ptr<KvCache> make_kivi_kv_cache(const KiviParams& p, const KvShape& shape, const KvCacheOptions& options) {
    AQPIM_CHECK(p.bits >= 1 && p.bits <= 8, "kivi: bits={} must be in 1..8", p.bits);
    AQPIM_CHECK(p.g >= 1, "kivi: group size g={} must be positive", p.g);
    AQPIM_CHECK(shape.head_dim % p.g == 0, "kivi: group size g={} does not divide head_dim {}", p.g, shape.head_dim);
    AQPIM_CHECK(p.window >= 0, "kivi: window={} must be non-negative", p.window);
    return std::make_unique<KiviKvCache>(p, shape, options);
}

}  // namespace aqpim::kv
