#pragma once
// A random-weight Llama-family model held in memory (F32), for forward-pass tests.

#include <memory>

#include "aqpim/model.h"
#include "support/random.h"

namespace aqpim::test {

struct TinyModelShape {
    int n_embd = 32, n_ff = 48, n_layer = 2, n_head = 4, n_kv_head = 2, n_vocab = 64;
    bool qkv_bias = false, tied = false;
    RopePairs rope = RopePairs::interleaved;
};

inline ModelWeights tiny_model(const TinyModelShape& s, std::uint64_t seed = 7) {
    ModelWeights w;
    ModelConfig& c = w.config;
    c.name = "tiny";
    c.arch = s.qkv_bias ? ModelArch::qwen2 : ModelArch::llama;
    c.n_embd = s.n_embd;
    c.n_ff = s.n_ff;
    c.n_layer = s.n_layer;
    c.n_head = s.n_head;
    c.n_kv_head = s.n_kv_head;
    c.head_dim = s.n_embd / s.n_head;
    c.n_vocab = s.n_vocab;
    c.n_ctx_train = 256;
    c.rope_pairs = s.rope;
    c.qkv_bias = s.qkv_bias;
    c.tied_output = s.tied;
    w.format = "memory";
    std::uint64_t next_seed = seed;
    const auto matrix = [&](std::int64_t rows, std::int64_t cols) {
        auto data = std::make_shared<std::vector<float>>(gaussian(std::size_t(rows * cols), next_seed++, 0.3f));
        w.storage.push_back(data);
        return WeightMatrix{GgmlType::F32, rows, cols, reinterpret_cast<const std::uint8_t*>(data->data())};
    };
    const auto vec = [&](int n, float mean) {
        std::vector<float> v = gaussian(std::size_t(n), next_seed++, 0.1f);
        for (float& x : v) x += mean;
        return v;
    };
    const int q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim;
    w.token_embd = matrix(c.n_vocab, c.n_embd);
    for (int il = 0; il < c.n_layer; ++il) {
        LayerWeights L;
        L.attn_norm = vec(c.n_embd, 1.0f);
        L.wq = matrix(q, c.n_embd);
        L.wk = matrix(kv, c.n_embd);
        L.wv = matrix(kv, c.n_embd);
        L.wo = matrix(c.n_embd, q);
        if (s.qkv_bias) {
            L.bq = vec(q, 0.0f);
            L.bk = vec(kv, 0.0f);
            L.bv = vec(kv, 0.0f);
        }
        L.ffn_norm = vec(c.n_embd, 1.0f);
        L.w_gate = matrix(c.n_ff, c.n_embd);
        L.w_up = matrix(c.n_ff, c.n_embd);
        L.w_down = matrix(c.n_embd, c.n_ff);
        w.layers.push_back(std::move(L));
    }
    w.output_norm = vec(c.n_embd, 1.0f);
    w.output = s.tied ? w.token_embd : matrix(c.n_vocab, c.n_embd);
    return w;
}

}  // namespace aqpim::test
