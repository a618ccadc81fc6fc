// The dense reference caches: per layer, sequence and KV head, keys and values as rows
// [n_tokens][head_dim] of f32 or f16.

#include <map>
#include <type_traits>

#include "aqpim/attention.h"
#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/kv_cache.h"
#include "kv/kv_state_io.h"

namespace aqpim {
namespace {

template <typename T>
class DenseKvCache final : public KvCache {
public:
    explicit DenseKvCache(const KvShape& shape) : KvCache(shape) {}

    std::string scheme() const override { return std::is_same_v<T, float> ? "f32" : "f16"; }

    void add_sequence(int seq_id) override {
        AQPIM_CHECK(seq_id >= 0, "kv cache: sequence id {} must be non-negative", seq_id);
        AQPIM_CHECK(!has_sequence(seq_id), "kv cache: sequence {} already exists", seq_id);
        Sequence& s = seqs_[seq_id];
        s.layers.resize(shape().n_layer);
        for (Layer& l : s.layers) {
            l.k.resize(shape().n_kv_head);
            l.v.resize(shape().n_kv_head);
        }
    }
    void remove_sequence(int seq_id) override { seqs_.erase(find(seq_id)); }
    bool has_sequence(int seq_id) const override { return seqs_.count(seq_id) != 0; }
    std::int64_t n_tokens(int seq_id, int il) const override { return layer(seq_id, il).n_tokens; }

    void append(int il, int seq_id, std::int64_t n, const float* k, const float* v) override {
        AQPIM_CHECK(n >= 0, "kv cache: cannot append {} tokens", n);
        Layer& l = mutable_layer(seq_id, il);
        const int hd = shape().head_dim, n_kv_heads = shape().n_kv_head;
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            for (auto [src, dst] : {std::pair{k, &l.k[ih]}, std::pair{v, &l.v[ih]}}) {
                const std::size_t old = dst->size();
                dst->resize(old + std::size_t(n) * hd);
                for (std::int64_t t = 0; t < n; ++t) store(src + (t * n_kv_heads + ih) * hd, dst->data() + old + t * hd, hd);
            }
        }
        l.n_tokens += n;
    }

    void attend(int il, int seq_id, int ih, const KvQuery& qr) const override {
        const Layer& l = layer(seq_id, il);
        AQPIM_CHECK(ih >= 0 && ih < shape().n_kv_head, "kv cache: KV head {} out of range [0, {})", ih,
                    shape().n_kv_head);
        const int hd = shape().head_dim;
        AttentionPartial part;
        for (int r = 0; r < qr.n_rows; ++r) {
            const std::int64_t p = qr.pos[r];
            AQPIM_CHECK(p >= 0 && p < l.n_tokens, "kv cache: query position {} but layer {} of sequence {} holds {} tokens",
                        p, il, seq_id, l.n_tokens);
            part.reset(qr.group, hd);
            const float* q = qr.q + r * qr.q_stride;
            if constexpr (std::is_same_v<T, float>)
                attend_dense_f32(q, qr.group, hd, l.k[ih].data(), l.v[ih].data(), p + 1, qr.scale, part, qr.ws);
            else
                attend_dense_f16(q, qr.group, hd, l.k[ih].data(), l.v[ih].data(), p + 1, qr.scale, part, qr.ws);
            part.finalize(qr.out + r * qr.out_stride);
        }
    }

    KvMemory memory() const override {
        KvMemory m;
        std::uint64_t elems = 0;
        for (const auto& [id, s] : seqs_) {
            m.n_tokens += s.layers[0].n_tokens;
            for (const Layer& l : s.layers) elems += std::uint64_t(l.n_tokens) * shape().n_kv_head * shape().head_dim;
        }
        m.add(fmt::format("keys {}", scheme()), elems * sizeof(T));
        m.add(fmt::format("values {}", scheme()), elems * sizeof(T));
        return m;
    }

    std::uint64_t sequence_bytes(std::int64_t n_tokens) const override {
        return std::uint64_t(n_tokens) * std::uint64_t(shape().elements_per_token()) * sizeof(T);
    }

    /// Section (docs/kv-state.md): layer counts, then per layer and KV head keys [n][head_dim] and
    /// values [n][head_dim] as stored (f32 or f16 bits).
    void save_sequence(int seq_id, ByteWriter& out) const override {
        kv::write_layer_counts(out, *this, seq_id);
        for (const Layer& l : find(seq_id)->second.layers)
            for (int ih = 0; ih < shape().n_kv_head; ++ih)
                for (const std::vector<T>* rows : {&l.k[ih], &l.v[ih]}) {
                    if constexpr (std::is_same_v<T, float>)
                        out.f32s(rows->data(), rows->size());
                    else
                        out.u16s(rows->data(), rows->size());
                }
    }

    void restore_sequence(int seq_id, ByteReader& in) override {
        kv::check_new_sequence(*this, seq_id);
        const std::vector<std::int64_t> n = kv::read_layer_counts(in, shape());
        Sequence s;
        s.layers.resize(shape().n_layer);
        const std::uint64_t hd = std::uint64_t(shape().head_dim);
        for (int il = 0; il < shape().n_layer; ++il) {
            Layer& l = s.layers[il];
            l.n_tokens = n[il];
            l.k.resize(shape().n_kv_head);
            l.v.resize(shape().n_kv_head);
            for (int ih = 0; ih < shape().n_kv_head; ++ih)
                for (const bool value : {false, true}) {
                    const std::string field = fmt::format("layer {} KV head {} {}", il, ih, value ? "values" : "keys");
                    const std::uint64_t count = std::uint64_t(l.n_tokens) * hd;
                    in.require(count, sizeof(T), field);
                    std::vector<T>& rows = value ? l.v[ih] : l.k[ih];
                    rows.resize(std::size_t(count));
                    if constexpr (std::is_same_v<T, float>)
                        kv::read_finite_f32(in, rows.data(), count, field);
                    else
                        kv::read_finite_f16(in, rows.data(), count, field);
                }
        }
        seqs_.emplace(seq_id, std::move(s));
    }

private:
    struct Layer {
        std::int64_t n_tokens = 0;
        std::vector<std::vector<T>> k, v;  ///< [n_kv_head] of [n_tokens][head_dim]
    };
    struct Sequence {
        std::vector<Layer> layers;
    };

    static void store(const float* src, T* dst, int n) {
        if constexpr (std::is_same_v<T, float>)
            std::copy(src, src + n, dst);
        else
            f32_to_fp16(src, dst, std::size_t(n));
    }
    typename std::map<int, Sequence>::const_iterator find(int seq_id) const {
        auto it = seqs_.find(seq_id);
        AQPIM_CHECK(it != seqs_.end(), "kv cache: no sequence {}", seq_id);
        return it;
    }
    const Layer& layer(int seq_id, int il) const {
        AQPIM_CHECK(il >= 0 && il < shape().n_layer, "kv cache: layer {} out of range [0, {})", il, shape().n_layer);
        return find(seq_id)->second.layers[il];
    }

    Layer& mutable_layer(int seq_id, int il) {
        layer(seq_id, il);  // validates
        return seqs_.find(seq_id)->second.layers[il];
    }

    std::map<int, Sequence> seqs_;
};

}  // namespace

std::unique_ptr<KvCache> make_dense_kv_cache(const KvShape& shape, DenseKvType type) {
    if (type == DenseKvType::f32) return std::make_unique<DenseKvCache<float>>(shape);
    return std::make_unique<DenseKvCache<f16_t>>(shape);
}

}  // namespace aqpim
