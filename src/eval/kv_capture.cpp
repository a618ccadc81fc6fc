#include "aqpim/kv_capture.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/safetensors.h"
#include "aqpim/threads.h"
#include "model/hf_config.h"

namespace aqpim {

namespace {

nlohmann::json read_json(const std::string& path) {
    return parse_json(read_whole_file(path, "JSON file"), path);
}

// y [n_out] = W [n_out][n_in] x
void matvec(const float* W, const float* x, int n_out, int n_in, float* y) {
    for (int o = 0; o < n_out; ++o) {
        const float* w = W + std::int64_t(o) * n_in;
        float s = 0;
        for (int i = 0; i < n_in; ++i) s += w[i] * x[i];
        y[o] = s;
    }
}

// HF rotate_half RoPE on one head: pairs (i, i + D/2), frequency theta^(-2i/D).
void rope_neox(float* x, int D, int pos, float theta) {
    for (int i = 0; i < D / 2; ++i) {
        const double freq = std::pow(double(theta), -2.0 * i / D);
        const double a = pos * freq, c = std::cos(a), s = std::sin(a);
        const float x0 = x[i], x1 = x[i + D / 2];
        x[i] = float(x0 * c - x1 * s);
        x[i + D / 2] = float(x1 * c + x0 * s);
    }
}

}  // namespace

std::vector<float> CapturedAttention::kv_head(const std::vector<float>& kv, int ih) const {
    AQPIM_CHECK(ih >= 0 && ih < n_kv_head, "KV head {} out of range [0, {})", ih, n_kv_head);
    std::vector<float> out(std::size_t(n_tokens) * head_dim);
    for (int t = 0; t < n_tokens; ++t)
        for (int d = 0; d < head_dim; ++d)
            out[std::size_t(t) * head_dim + d] = kv[(std::size_t(t) * n_kv_head + ih) * head_dim + d];
    return out;
}

CapturedAttention capture_layer0(const std::string& model_dir, std::span<const std::int32_t> tokens) {
    const ModelConfig s = read_hf_config(model_dir + "/config.json");
    SafetensorsFile st(model_dir + "/model.safetensors");
    const auto embed = st.read_f32("model.embed_tokens.weight", {s.n_vocab, s.n_embd});
    const auto norm = st.read_f32("model.layers.0.input_layernorm.weight", {s.n_embd});
    const int q_out = s.n_head * s.head_dim, kv_out = s.n_kv_head * s.head_dim;
    const auto wq = st.read_f32("model.layers.0.self_attn.q_proj.weight", {q_out, s.n_embd});
    const auto wk = st.read_f32("model.layers.0.self_attn.k_proj.weight", {kv_out, s.n_embd});
    const auto wv = st.read_f32("model.layers.0.self_attn.v_proj.weight", {kv_out, s.n_embd});

    CapturedAttention c;
    c.n_tokens = int(tokens.size());
    c.n_head = s.n_head;
    c.n_kv_head = s.n_kv_head;
    c.head_dim = s.head_dim;
    c.q.resize(std::size_t(c.n_tokens) * q_out);
    c.k.resize(std::size_t(c.n_tokens) * kv_out);
    c.v.resize(std::size_t(c.n_tokens) * kv_out);
    for (std::int32_t id : tokens)
        AQPIM_CHECK(id >= 0 && id < s.n_vocab, "token id {} out of range [0, {})", id, s.n_vocab);
    parallel_for(c.n_tokens, [&](std::int64_t t) {
        std::vector<float> h(s.n_embd);
        const float* e = embed.data() + std::int64_t(tokens[t]) * s.n_embd;
        double ss = 0;
        for (int i = 0; i < s.n_embd; ++i) ss += double(e[i]) * e[i];
        const float inv = float(1.0 / std::sqrt(ss / s.n_embd + s.rms_eps));
        for (int i = 0; i < s.n_embd; ++i) h[i] = e[i] * inv * norm[i];
        float* q = c.q.data() + t * q_out;
        float* k = c.k.data() + t * kv_out;
        matvec(wq.data(), h.data(), q_out, s.n_embd, q);
        matvec(wk.data(), h.data(), kv_out, s.n_embd, k);
        matvec(wv.data(), h.data(), kv_out, s.n_embd, c.v.data() + t * kv_out);
        for (int ih = 0; ih < s.n_head; ++ih) rope_neox(q + ih * s.head_dim, s.head_dim, int(t), s.rope_theta);
        for (int ih = 0; ih < s.n_kv_head; ++ih) rope_neox(k + ih * s.head_dim, s.head_dim, int(t), s.rope_theta);
    });
    return c;
}

std::vector<std::int32_t> read_token_ids(const std::string& path) {
    const auto j = read_json(path);
    AQPIM_CHECK(j.is_array(), "{}: expected a JSON array of token ids", path);
    std::vector<std::int32_t> ids;
    ids.reserve(j.size());
    for (const auto& v : j) {
        AQPIM_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < (1ll << 31),
                    "{}: bad token id {}", path, json_excerpt(v));
        ids.push_back(std::int32_t(v.get<std::int64_t>()));
    }
    return ids;
}

}  // namespace aqpim
