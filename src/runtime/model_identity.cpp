// model_identity: the fingerprint a KV state carries so that it is never restored into another model.

#include "aqpim/byte_io.h"
#include "aqpim/hash.h"
#include "aqpim/kv_state.h"
#include "aqpim/model.h"

namespace aqpim {

namespace {

/// The configuration's numbers, little-endian, in the order docs/kv-state.md lists them (the name
/// and n_ctx_train, a default rather than a property of the weights, are left out).
void write_config(ByteWriter& w, const ModelConfig& c) {
    for (int v : {int(c.arch), c.n_embd, c.n_ff, c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_vocab,
                  int(c.rope_pairs), int(c.rope_scaling.kind), c.rope_scaling.original_context, int(c.qkv_bias),
                  int(c.tied_output)})
        w.u32(std::uint32_t(v));
    for (float v : {c.rms_eps, c.rope_theta, c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                    c.rope_scaling.high_freq_factor})
        w.f32(v);
}

class WeightHasher {
public:
    void matrix(const WeightMatrix& m) {
        ByteWriter w;
        w.u32(std::uint32_t(m.type));
        w.u64(std::uint64_t(m.rows));
        w.u64(std::uint64_t(m.cols));
        add(w);
        if (!m.empty()) h_.update(m.data, m.n_bytes());  // as stored: the file's little-endian bytes
    }
    void vector(const std::vector<float>& v) {
        ByteWriter w;
        w.u64(v.size());
        w.f32s(v.data(), v.size());
        add(w);
    }
    void add(const ByteWriter& w) { h_.update(w.data().data(), w.size()); }
    std::uint64_t digest() const { return h_.digest(); }

private:
    Xxh64 h_;
};

}  // namespace

ModelIdentity model_identity(const ModelWeights& weights) {
    WeightHasher h;
    ByteWriter config;
    write_config(config, weights.config);
    h.add(config);
    h.matrix(weights.token_embd);
    for (const LayerWeights& l : weights.layers) {
        h.vector(l.attn_norm);
        for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo}) h.matrix(*m);
        for (const std::vector<float>* b : {&l.bq, &l.bk, &l.bv}) h.vector(*b);
        h.vector(l.ffn_norm);
        for (const WeightMatrix* m : {&l.w_gate, &l.w_up, &l.w_down}) h.matrix(*m);
    }
    h.vector(weights.output_norm);
    if (!weights.config.tied_output) h.matrix(weights.output);  // tied: the embedding, hashed already
    h.vector(weights.rope_freq_factors);
    return {h.digest(), weights.config.name};
}

}  // namespace aqpim
