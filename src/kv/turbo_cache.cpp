// The turbo / qjl cache: f16 rows on arrival, outlier channels chosen once `sel` tokens exist, rows
// coded when they leave the f16 state, accounting, and the two attention paths.

#include "kv/turbo_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/workspace.h"
#include "kv/kv_state_io.h"

namespace aqpim::kv {

// ---- value rows ------------------------------------------------------------------------------------

TurboValueCodec::TurboValueCodec(TurboStreamCoder turbo) : head_dim_(turbo.head_dim()), turbo_(std::move(turbo)) {
    AQPIM_CHECK(turbo_->rotated_only(), "TurboQuant values: every part needs mse bits and no sketch");
}
TurboValueCodec::TurboValueCodec(RowCodec rows) : head_dim_(rows.head_dim), rows_(rows) {}
TurboValueCodec::TurboValueCodec(int head_dim) : head_dim_(head_dim) {}

std::size_t TurboValueCodec::row_bytes() const {
    if (turbo_) return turbo_->row_bytes().total();
    if (rows_) return rows_->row_bytes();
    return std::size_t(head_dim_) * sizeof(f16_t);
}

void TurboValueCodec::encode(const float* x, const int* channels, std::uint8_t* row) const {
    if (turbo_)
        turbo_->encode(x, channels, row);
    else if (rows_)
        rows_->encode(x, 1, head_dim_, row);
    else
        f32_to_fp16(x, reinterpret_cast<f16_t*>(row), std::size_t(head_dim_));
}

void TurboValueCodec::decode_tile(const std::uint8_t* rows, std::int64_t n, float* out) const {
    if (turbo_)
        turbo_->decode_ext(rows, n, out);
    else
        decode(rows, n, nullptr, out);
}

void TurboValueCodec::decode(const std::uint8_t* rows, std::int64_t n, const int* channels, float* out) const {
    if (turbo_)
        turbo_->decode(rows, n, channels, out);
    else if (rows_)
        rows_->decode(rows, n, out);
    else
        fp16_to_f32(reinterpret_cast<const f16_t*>(rows), out, std::size_t(n) * head_dim_);
}

namespace {

// ---- state -----------------------------------------------------------------------------------------

struct TurboHead {
    std::vector<std::uint8_t> k_rows, v_rows;  ///< [n_coded][key / value row bytes]
    std::vector<f16_t> k16, v16;               ///< [n_tokens - f16_start][head_dim]
    std::vector<double> k_energy, v_energy;    ///< [head_dim] Σ x² per channel while choosing outliers (split streams)
    std::vector<std::uint8_t> k_mask, v_mask;  ///< [ceil(head_dim / 8)] bit c: channel c is an outlier (once chosen)
};

struct TurboLayer {
    std::int64_t n_tokens = 0;
    std::uint64_t bytes = 0;
    std::int64_t n_coded = 0;    ///< quantized(n_tokens)
    std::int64_t f16_start = 0;  ///< first token with f16 rows: quantized(first position of the last append + 1)
    std::vector<TurboHead> heads;  ///< [n_kv_head]
};

/// Bytes of an outlier set: a bitmask over head_dim channels.
std::uint64_t mask_bytes(int head_dim) { return std::uint64_t(head_dim + 7) / 8; }

/// The mask of the `n_out` channels of largest energy (ties to the lower channel).
std::vector<std::uint8_t> outlier_mask(const std::vector<double>& energy, int n_out) {
    std::vector<int> order(energy.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return energy[a] > energy[b]; });
    std::vector<std::uint8_t> mask(mask_bytes(int(energy.size())), 0);
    for (int i = 0; i < n_out; ++i) mask[order[i] / 8] |= std::uint8_t(1u << (order[i] % 8));
    return mask;
}

/// The channel permutation a split stream codes in (turbo_codec.h): the mask's channels ascending,
/// then the others ascending, into `out` [head_dim]. nullptr for an unsplit stream (empty mask).
const int* mask_channels(const std::vector<std::uint8_t>& mask, int head_dim, int* out) {
    if (mask.empty()) return nullptr;
    int i = 0;
    for (int pass = 1; pass >= 0; --pass)
        for (int c = 0; c < head_dim; ++c)
            if (((mask[c / 8] >> (c % 8)) & 1) == pass) out[i++] = c;
    return out;
}

/// The permutations of the key and value streams of one head, on the stack up to head_dim 256.
struct HeadChannels {
    explicit HeadChannels(int head_dim) : k(std::size_t(head_dim)), v(std::size_t(head_dim)) {}
    LocalBuffer<int, 256> k, v;
};

class TurboKvCache final : public ScalarCacheBase<TurboLayer> {
public:
    TurboKvCache(TurboCacheParams p, const KvShape& shape, const KvCacheOptions& options, std::uint64_t shared)
        : ScalarCacheBase(shape, options, shared), p_(std::move(p)) {
        split_k_ = p_.keys->parts().size() > 1;
        split_v_ = p_.values->turbo() && p_.values->turbo()->parts().size() > 1;
    }

    std::string scheme() const override { return p_.scheme; }

    void append(int il, int seq_id, std::int64_t n, const float* k, const float* v) override {
        AQPIM_CHECK(n >= 0, "kv cache {}: cannot append {} tokens", scheme(), n);
        TurboLayer& l = mutable_layer(seq_id, il);
        if (n == 0) return;
        const int n_kv_heads = shape().n_kv_head, hd = shape().head_dim;
        const std::int64_t n_new = l.n_tokens + n, coded_new = quantized(n_new), f16_new = quantized(l.n_tokens + 1);
        charge(l, layer_bytes(n_new), il, seq_id, n);
        l.heads.resize(n_kv_heads);
        const std::size_t krb = p_.keys->row_bytes().total(), vrb = p_.values->row_bytes();
        std::vector<float> x(hd);
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            TurboHead& h = l.heads[ih];
            append_f16_rows(k, n, ih, h.k16);
            append_f16_rows(v, n, ih, h.v16);
            choose_outliers(h, l.n_tokens, n_new, l.f16_start);
            HeadChannels ch{hd};
            const int* kch = mask_channels(h.k_mask, hd, ch.k.data());
            const int* vch = mask_channels(h.v_mask, hd, ch.v.data());
            h.k_rows.resize(std::size_t(coded_new) * krb);
            h.v_rows.resize(std::size_t(coded_new) * vrb);
            for (std::int64_t t = l.n_coded; t < coded_new; ++t) {
                const std::size_t off = std::size_t(t - l.f16_start) * hd;
                fp16_to_f32(h.k16.data() + off, x.data(), std::size_t(hd));
                p_.keys->encode(x.data(), kch, h.k_rows.data() + std::size_t(t) * krb);
                fp16_to_f32(h.v16.data() + off, x.data(), std::size_t(hd));
                p_.values->encode(x.data(), vch, h.v_rows.data() + std::size_t(t) * vrb);
            }
            const std::ptrdiff_t drop = (f16_new - l.f16_start) * hd;
            h.k16.erase(h.k16.begin(), h.k16.begin() + drop);
            h.v16.erase(h.v16.begin(), h.v16.begin() + drop);
        }
        l.n_tokens = n_new;
        l.n_coded = coded_new;
        l.f16_start = f16_new;
    }

    void attend(int il, int seq_id, int ih, const KvQuery& query) const override {
        if (p_.decode_attention) return ScalarCacheBase::attend(il, seq_id, ih, query);  // decoded tiles, dense
        const TurboLayer& l = attended_layer(il, seq_id, ih, query);
        const TurboHead& h = l.heads[ih];
        HeadChannels ch{shape().head_dim};
        TurboHeadView view{head_view(l, ih), h.k_rows.data(), h.v_rows.data(),
                           mask_channels(h.k_mask, shape().head_dim, ch.k.data()),
                           mask_channels(h.v_mask, shape().head_dim, ch.v.data())};
        attend_turbo(*p_.keys, *p_.values, view, query);
    }

    KvMemory memory() const override {
        std::uint64_t coded = 0, f16_rows = 0, masks = 0, energies = 0;  // head rows / bytes over all layers
        for (const auto& [id, layers] : sequences())
            for (const TurboLayer& l : layers) {
                coded += std::uint64_t(l.n_coded) * shape().n_kv_head;
                f16_rows += std::uint64_t(l.n_tokens - l.n_coded) * shape().n_kv_head;
                masks += selection_bytes(l.n_tokens, false) * shape().n_kv_head;
                energies += selection_bytes(l.n_tokens, true) * shape().n_kv_head;
            }
        KvMemory m;
        m.n_tokens = stored_tokens();
        const TurboRowBytes& kb = p_.keys->row_bytes();
        add_rows(m, "key", kb, coded);
        if (const auto& t = p_.values->turbo()) {
            add_rows(m, "value", t->row_bytes(), coded);
        } else if (const auto& r = p_.values->rows()) {
            m.add("value codes", coded * r->code_bytes());
            m.add("value scales f16", coded * r->scale_bytes());
            if (r->min_bytes()) m.add("value mins f16", coded * r->min_bytes());
        } else {
            m.add("values f16", coded * p_.values->row_bytes());
        }
        const std::uint64_t f16_bytes = f16_rows * shape().head_dim * sizeof(f16_t);
        m.add("keys f16 (window, before outlier choice)", f16_bytes);
        m.add("values f16 (window, before outlier choice)", f16_bytes);
        if (split_k_ || split_v_) {
            m.add("outlier channel masks", masks);
            m.add("channel energies f64 (choosing outliers)", energies);
        }
        add_shared(m, "key", *p_.keys);
        if (const auto& t = p_.values->turbo()) add_shared(m, "value", *t);
        AQPIM_ASSERT(m.bytes == held_bytes());
        return m;
    }

    /// One more sequence's bytes: the shared tables are held once, whatever the sequences, so they
    /// are in memory() but not here.
    std::uint64_t sequence_bytes(std::int64_t n_tokens) const override {
        return std::uint64_t(shape().n_layer) * layer_bytes(n_tokens);
    }

    /// Section (docs/kv-state.md): layer counts, then per layer and KV head (q = quantized(n)): key
    /// rows [q][key row bytes], value rows [q][value row bytes], f16 keys and values [n - q][head_dim],
    /// and once n >= sel the outlier masks of the split streams (key, then value; ceil(head_dim / 8)
    /// bytes each). Before sel the channel energies are not written: every token is still f16 then,
    /// and the restore sums them again in the order append did. As for kivi2, only the steady state
    /// is kept (the restored sequence answers its last position, as after a decode step).
    void save_sequence(int seq_id, ByteWriter& out) const override {
        layer(seq_id, 0);  // validates
        write_layer_counts(out, *this, seq_id);
        const std::size_t hd = std::size_t(shape().head_dim);
        for (const TurboLayer& l : sequences().at(seq_id))
            for (const TurboHead& h : l.heads) {
                out.bytes(h.k_rows.data(), h.k_rows.size());
                out.bytes(h.v_rows.data(), h.v_rows.size());
                const std::size_t skip = std::size_t(l.n_coded - l.f16_start) * hd;  // rows kept for the last step
                for (const auto* rows : {&h.k16, &h.v16}) out.u16s(rows->data() + skip, rows->size() - skip);
                out.bytes(h.k_mask.data(), h.k_mask.size());
                out.bytes(h.v_mask.data(), h.v_mask.size());
            }
    }

    void restore_sequence(int seq_id, ByteReader& in) override {
        const std::vector<std::int64_t> n = begin_restore(seq_id, in, [&](std::int64_t t) { return layer_bytes(t); });
        const int hd = shape().head_dim;
        const std::size_t krb = p_.keys->row_bytes().total(), vrb = p_.values->row_bytes();
        std::vector<TurboLayer> layers(shape().n_layer);
        for (int il = 0; il < shape().n_layer; ++il) {
            TurboLayer& l = layers[il];
            l.n_tokens = n[il];
            l.n_coded = l.f16_start = quantized(l.n_tokens);
            l.bytes = layer_bytes(l.n_tokens);
            l.heads.resize(shape().n_kv_head);
            for (int ih = 0; ih < shape().n_kv_head; ++ih) {
                TurboHead& h = l.heads[ih];
                const std::string at = fmt::format("layer {} KV head {}", il, ih);
                const auto kr = in.bytes(std::uint64_t(l.n_coded) * krb, at + " key rows");
                h.k_rows.assign(kr.begin(), kr.end());
                const auto vr = in.bytes(std::uint64_t(l.n_coded) * vrb, at + " value rows");
                h.v_rows.assign(vr.begin(), vr.end());
                const std::uint64_t f16_values = std::uint64_t(l.n_tokens - l.n_coded) * hd;
                for (auto [rows, what] : {std::pair{&h.k16, " f16 keys"}, std::pair{&h.v16, " f16 values"}}) {
                    in.require(f16_values, 2, at + what);
                    rows->resize(std::size_t(f16_values));
                    read_finite_f16(in, rows->data(), f16_values, at + what);
                }
                if (l.n_tokens < p_.sel) {
                    choose_outliers(h, 0, l.n_tokens, 0);
                    continue;
                }
                if (split_k_) h.k_mask = read_mask(in, p_.keys->first_part_dim(), at + " key outlier mask");
                if (split_v_) h.v_mask = read_mask(in, p_.values->turbo()->first_part_dim(), at + " value outlier mask");
            }
        }
        insert_sequence(seq_id, std::move(layers));
    }

protected:
    SegmentedHead head_view(const TurboLayer& l, int ih) const override {
        SegmentedHead h;
        h.head_dim = shape().head_dim;
        h.n_tokens = l.n_tokens;
        h.tile = tile_for_granule(1);
        h.window = p_.window;
        h.coded_from = p_.sel;
        h.f16_start = l.f16_start;
        h.k16 = l.heads[ih].k16.data();
        h.v16 = l.heads[ih].v16.data();
        return h;
    }

    void decode_tile(const TurboLayer& l, int ih, std::int64_t t0, std::int64_t n, float* K, float* V) const override {
        AQPIM_ASSERT(t0 + n <= l.n_coded);
        const TurboHead& h = l.heads[ih];
        const int hd = shape().head_dim;
        HeadChannels ch{hd};
        p_.keys->decode(h.k_rows.data() + std::size_t(t0) * p_.keys->row_bytes().total(), n,
                        mask_channels(h.k_mask, hd, ch.k.data()), K);
        p_.values->decode(h.v_rows.data() + std::size_t(t0) * p_.values->row_bytes(), n,
                          mask_channels(h.v_mask, hd, ch.v.data()), V);
    }

private:
    std::int64_t quantized(std::int64_t n) const { return n < p_.sel ? 0 : std::max<std::int64_t>(0, n - p_.window); }

    /// Appending tokens [n0, n1) of a head: energies of the split streams' channels over the tokens
    /// before `sel` (from the f16 rows, in token order), and the outlier channels once `sel` exist.
    void choose_outliers(TurboHead& h, std::int64_t n0, std::int64_t n1, std::int64_t f16_start) const {
        if (!(split_k_ || split_v_) || n0 >= p_.sel) return;
        const int hd = shape().head_dim;
        const std::int64_t end = std::min<std::int64_t>(n1, p_.sel);
        for (auto [split, rows, energy] : {std::tuple{split_k_, &h.k16, &h.k_energy}, std::tuple{split_v_, &h.v16, &h.v_energy}}) {
            if (!split) continue;
            energy->resize(std::size_t(hd), 0.0);
            for (std::int64_t t = n0; t < end; ++t)
                for (int c = 0; c < hd; ++c) {
                    const double x = fp16_to_f32_scalar((*rows)[std::size_t(t - f16_start) * hd + c]);
                    (*energy)[c] += x * x;
                }
        }
        if (n1 < p_.sel) return;
        if (split_k_) h.k_mask = outlier_mask(h.k_energy, p_.keys->first_part_dim());
        if (split_v_) h.v_mask = outlier_mask(h.v_energy, p_.values->turbo()->first_part_dim());
        std::vector<double>().swap(h.k_energy);
        std::vector<double>().swap(h.v_energy);
    }

    /// An outlier mask as outlier_mask() leaves it: exactly n_out channel bits, none past head_dim.
    std::vector<std::uint8_t> read_mask(ByteReader& in, int n_out, const std::string& what) const {
        const int hd = shape().head_dim;
        const auto b = in.bytes(mask_bytes(hd), what);
        std::vector<std::uint8_t> mask(b.begin(), b.end());
        int bits = 0;
        for (int c = 0; c < int(mask.size()) * 8; ++c) {
            const bool set = (mask[c / 8] >> (c % 8)) & 1;
            AQPIM_CHECK(!set || c < hd, "kv state {}: {} marks channel {} of a head_dim of {}", scheme(), what, c, hd);
            bits += set;
        }
        AQPIM_CHECK(bits == n_out, "kv state {}: {} marks {} channels, the scheme's outliers are {}", scheme(), what,
                    bits, n_out);
        return mask;
    }

    /// Per KV head at n tokens: the outlier masks once chosen (energies = false), or the energies
    /// held while choosing (energies = true).
    std::uint64_t selection_bytes(std::int64_t n, bool energies) const {
        const int n_split = int(split_k_) + int(split_v_);
        if (n_split == 0 || n == 0) return 0;
        if (energies) return n < p_.sel ? std::uint64_t(n_split) * shape().head_dim * sizeof(double) : 0;
        return n >= p_.sel ? n_split * mask_bytes(shape().head_dim) : 0;
    }

    /// Bytes of one layer of one sequence at n tokens (all KV heads, steady state).
    std::uint64_t layer_bytes(std::int64_t n) const {
        const std::int64_t q = quantized(n);
        const std::uint64_t per_head = std::uint64_t(q) * (p_.keys->row_bytes().total() + p_.values->row_bytes()) +
                                       std::uint64_t(n - q) * shape().head_dim * 2 * sizeof(f16_t) +
                                       selection_bytes(n, false) + selection_bytes(n, true);
        return per_head * shape().n_kv_head;
    }

    static void add_rows(KvMemory& m, const char* kind, const TurboRowBytes& b, std::uint64_t rows) {
        if (b.codes) m.add(fmt::format("{} codes", kind), rows * b.codes);
        if (b.norms) m.add(fmt::format("{} norms f16", kind), rows * b.norms);
        if (b.signs) m.add(fmt::format("{} qjl signs", kind), rows * b.signs);
        if (b.sign_norms) m.add(fmt::format("{} qjl norms f16", kind), rows * b.sign_norms);
    }

    static void add_shared(KvMemory& m, const char* kind, const TurboStreamCoder& c) {
        if (c.rotation_bytes()) m.add(fmt::format("{} rotations f32 (shared)", kind), c.rotation_bytes());
        if (c.projection_bytes()) m.add(fmt::format("{} qjl projections f32 (shared)", kind), c.projection_bytes());
        if (c.codebook_bytes()) m.add(fmt::format("{} codebooks f32 (shared)", kind), c.codebook_bytes());
    }

    TurboCacheParams p_;
    bool split_k_ = false, split_v_ = false;
};

std::uint64_t shared_bytes(const TurboCacheParams& p) {
    std::uint64_t n = p.keys->rotation_bytes() + p.keys->projection_bytes() + p.keys->codebook_bytes();
    if (const auto& t = p.values->turbo()) n += t->rotation_bytes() + t->projection_bytes() + t->codebook_bytes();
    return n;
}

}  // namespace

std::unique_ptr<KvCache> make_turbo_qjl_cache(TurboCacheParams p, const KvShape& shape, const KvCacheOptions& options) {
    AQPIM_CHECK(p.keys && p.values, "kv cache {}: keys and values need a code", p.scheme);
    AQPIM_CHECK(p.keys->head_dim() == shape.head_dim && p.values->head_dim() == shape.head_dim,
                "kv cache {}: codes of head_dim {} / {} for a model with head_dim {}", p.scheme, p.keys->head_dim(),
                p.values->head_dim(), shape.head_dim);
    const bool split = p.keys->parts().size() > 1 || (p.values->turbo() && p.values->turbo()->parts().size() > 1);
    AQPIM_CHECK(split == (p.sel >= 1) && p.sel >= 0, "kv cache {}: sel={} with{} outlier channels", p.scheme, p.sel,
                split ? "" : "out");
    AQPIM_CHECK(p.window >= 0, "kv cache {}: window={} must be non-negative", p.scheme, p.window);
    const std::uint64_t shared = shared_bytes(p);
    return std::make_unique<TurboKvCache>(std::move(p), shape, options, shared);
}

}  // namespace aqpim::kv
