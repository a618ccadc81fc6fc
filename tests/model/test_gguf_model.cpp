// GGUF model loader (llama, qwen2) on the shared models and on small written files, and
// `aqpim synth` end to end (written by the CLI, loaded back).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <unistd.h>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/model.h"
#include "aqpim/transformer.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;

using test::temp_path;

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

/// The message of the aqpim::Error fn throws ("" if none).
std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

float value_at(const std::string& tensor, std::int64_t i) {
    return float(std::hash<std::string>{}(tensor) % 97) * 0.01f + float(i % 13) * 0.001f;
}

/// A small model written with GgufWriter (no vocabulary), with knobs to break it.
struct TinyModel {
    std::string arch = "llama";
    std::int64_t E = 256, F = 256, L = 2, H = 2, KV = 1, HD = 128, V = 64;
    bool tied = false, bias = false;
    std::map<std::string, GgmlType> types;                     ///< per tensor (default F32)
    std::set<std::string> skip;                                ///< tensors left out
    std::map<std::string, std::vector<std::int64_t>> shapes;   ///< per tensor shape override
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> extra;  ///< more F32 tensors
    std::function<void(GgufWriter&)> meta;                     ///< more (or replaced) keys
    std::set<std::string> nan_at_3;                            ///< F32 tensors whose element 3 is NaN

    std::string write(const std::string& name) const {
        GgufWriter w;
        const std::string a = arch;
        w.set_string("general.architecture", a);
        w.set_string("general.name", "tiny");
        w.set_u32(a + ".context_length", 512);
        w.set_u32(a + ".embedding_length", std::uint32_t(E));
        w.set_u32(a + ".feed_forward_length", std::uint32_t(F));
        w.set_u32(a + ".block_count", std::uint32_t(L));
        w.set_u32(a + ".attention.head_count", std::uint32_t(H));
        w.set_u32(a + ".attention.head_count_kv", std::uint32_t(KV));
        w.set_u32(a + ".attention.key_length", std::uint32_t(HD));
        w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
        w.set_f32(a + ".rope.freq_base", 20000.0f);
        if (meta) meta(w);
        const auto add = [&](const std::string& t, std::vector<std::int64_t> ne) {
            if (skip.count(t)) return;
            if (shapes.count(t)) ne = shapes.at(t);
            const GgmlType type = types.count(t) ? types.at(t) : GgmlType::F32;
            std::int64_t n = 1;
            for (auto d : ne) n *= d;
            std::vector<std::uint8_t> bytes(ggml_row_bytes(type, ne[0]) * std::size_t(n / ne[0]), 0);
            if (type == GgmlType::F32)
                for (std::int64_t i = 0; i < n; ++i) {
                    const float v = i == 3 && nan_at_3.count(t) ? std::nanf("") : value_at(t, i);
                    std::memcpy(bytes.data() + 4 * i, &v, 4);
                }
            w.add_tensor(t, ne, type, std::move(bytes));
        };
        const std::int64_t Q = H * HD, K = KV * HD;
        add("token_embd.weight", {E, V});
        add("output_norm.weight", {E});
        if (!tied) add("output.weight", {E, V});
        for (std::int64_t il = 0; il < L; ++il) {
            const auto t = [il](const char* what) { return fmt::format("blk.{}.{}", il, what); };
            add(t("attn_norm.weight"), {E});
            add(t("attn_q.weight"), {E, Q});
            add(t("attn_k.weight"), {E, K});
            add(t("attn_v.weight"), {E, K});
            if (bias) {
                add(t("attn_q.bias"), {Q});
                add(t("attn_k.bias"), {K});
                add(t("attn_v.bias"), {K});
            }
            add(t("attn_output.weight"), {Q, E});
            add(t("ffn_norm.weight"), {E});
            add(t("ffn_gate.weight"), {E, F});
            add(t("ffn_up.weight"), {E, F});
            add(t("ffn_down.weight"), {F, E});
        }
        for (const auto& [t, ne] : extra) add(t, ne);
        const std::string path = temp_path(name + ".gguf");
        w.write(path);
        return path;
    }
};

// ---- the shared models --------------------------------------------------------------------------

TEST(GgufModel, LoadsStories260K) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    const LoadedModel m = load_gguf_model(test::shared_dir() + "/models/stories260K/stories260K.gguf");
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(c.arch, ModelArch::llama);
    EXPECT_EQ(c.n_embd, 64);
    EXPECT_EQ(c.n_ff, 172);
    EXPECT_EQ(c.n_layer, 5);
    EXPECT_EQ(c.n_head, 8);
    EXPECT_EQ(c.n_kv_head, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_EQ(c.n_ctx_train, 128);  // what the converter wrote (a default, not a limit)
    EXPECT_NEAR(c.rms_eps, 1e-5f, 1e-9f);
    EXPECT_EQ(c.rope_theta, 10000.0f);
    EXPECT_EQ(c.rope_pairs, RopePairs::interleaved);
    EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::none);
    EXPECT_FALSE(c.tied_output);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_EQ(m.weights.format, "gguf");
    ASSERT_EQ(m.weights.layers.size(), 5u);
    EXPECT_TRUE(m.weights.rope_freq_factors.empty());
    const LayerWeights& l0 = m.weights.layers[0];
    EXPECT_EQ(l0.wk.rows, 32);
    EXPECT_EQ(l0.wk.cols, 64);
    EXPECT_EQ(l0.w_down.rows, 64);
    EXPECT_EQ(l0.w_down.cols, 172);
    EXPECT_EQ(l0.wq.type, GgmlType::F32);
    EXPECT_TRUE(l0.bq.empty());
    EXPECT_NE(m.weights.output.data, m.weights.token_embd.data);

    // the llama.cpp conversion kept llama2.c's arrays as they were: compare with the checkpoint
    const std::string bin = read_file(test::shared_dir() + "/models/stories260K/stories260K.bin");
    const std::size_t V = 512, E = 64, L = 5;
    const float* ckpt = reinterpret_cast<const float*>(bin.data() + 28);
    EXPECT_EQ(std::memcmp(m.weights.token_embd.data, ckpt, V * E * 4), 0);
    const float* rms_att = ckpt + V * E;
    EXPECT_EQ(std::memcmp(l0.attn_norm.data(), rms_att, E * 4), 0);
    EXPECT_EQ(std::memcmp(m.weights.layers[4].attn_norm.data(), rms_att + 4 * E, E * 4), 0);
    const float* wq = rms_att + L * E;
    EXPECT_EQ(std::memcmp(l0.wq.data, wq, E * E * 4), 0);

    ASSERT_NE(m.tokenizer, nullptr);
    EXPECT_EQ(m.tokenizer->n_vocab(), 512);
    EXPECT_EQ(m.tokenizer->bos(), 1);
    EXPECT_EQ(m.tokenizer->eos(), 2);
}

TEST(GgufModel, LoadsAusten13m) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/austen-13m-f16.gguf");
    const LoadedModel m = load_gguf_model(test::shared_dir() + "/models/austen-13m/austen-13m-f16.gguf");
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(c.name, "Austen 13m");
    EXPECT_EQ(c.n_embd, 512);
    EXPECT_EQ(c.n_ff, 1408);
    EXPECT_EQ(c.n_layer, 4);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.n_kv_head, 2);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.n_vocab, 4096);
    EXPECT_EQ(c.n_ctx_train, 1024);
    EXPECT_EQ(c.rope_pairs, RopePairs::interleaved);
    EXPECT_FALSE(c.tied_output);
    const LayerWeights& l3 = m.weights.layers[3];
    EXPECT_EQ(l3.wq.type, GgmlType::F16);
    EXPECT_EQ(l3.wk.rows, 256);
    EXPECT_EQ(l3.w_gate.rows, 1408);
    EXPECT_EQ(m.weights.output.type, GgmlType::F16);
    ASSERT_EQ(l3.ffn_norm.size(), 512u);
    for (float x : l3.ffn_norm) EXPECT_TRUE(std::isfinite(x));
    // 16.0 M parameters (DATA.md); weight bytes: F16 matrices plus F32 norms
    EXPECT_NEAR(double(c.n_params()), 16.0e6, 0.1e6);
    ASSERT_NE(m.tokenizer, nullptr);
    EXPECT_EQ(m.tokenizer->n_vocab(), 4096);
}

// ---- written models -----------------------------------------------------------------------------

TEST(GgufModel, TinyLlamaConfigAndWeights) {
    TinyModel t;
    const LoadedModel m = load_gguf_model(t.write("tiny_llama"));
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(c.name, "tiny");
    EXPECT_EQ(c.n_embd, 256);
    EXPECT_EQ(c.n_head, 2);
    EXPECT_EQ(c.n_kv_head, 1);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.n_vocab, 64);
    EXPECT_EQ(c.n_ctx_train, 512);
    EXPECT_EQ(c.rms_eps, 1e-6f);
    EXPECT_EQ(c.rope_theta, 20000.0f);
    EXPECT_EQ(m.tokenizer, nullptr);  // no tokenizer.ggml.* keys
    const LayerWeights& l1 = m.weights.layers[1];
    EXPECT_EQ(l1.wo.rows, 256);
    EXPECT_EQ(l1.wo.cols, 256);
    float x;
    std::memcpy(&x, l1.wv.row(5) + 4 * 7, 4);
    EXPECT_EQ(x, value_at("blk.1.attn_v.weight", 5 * 256 + 7));
    EXPECT_EQ(l1.ffn_norm[9], value_at("blk.1.ffn_norm.weight", 9));
    EXPECT_EQ(m.weights.output_norm[3], value_at("output_norm.weight", 3));
}

TEST(GgufModel, DefaultsTiedOutputAndQuantizedTypes) {
    TinyModel t;
    t.tied = true;
    t.types["blk.0.attn_q.weight"] = GgmlType::Q8_0;
    t.types["blk.1.ffn_down.weight"] = GgmlType::Q4_K;
    t.types["blk.0.ffn_up.weight"] = GgmlType::Q6_K;
    t.types["token_embd.weight"] = GgmlType::Q4_0;
    const LoadedModel m = load_gguf_model(t.write("tiny_tied"));
    const ModelWeights& w = m.weights;
    EXPECT_TRUE(w.config.tied_output);
    EXPECT_EQ(w.output.data, w.token_embd.data);
    EXPECT_EQ(w.output.type, GgmlType::Q4_0);
    EXPECT_EQ(w.layers[0].wq.type, GgmlType::Q8_0);
    EXPECT_EQ(w.layers[1].w_down.type, GgmlType::Q4_K);
    EXPECT_EQ(w.layers[0].w_up.type, GgmlType::Q6_K);
    EXPECT_EQ(w.storage.size(), 1u);  // the mapping stays alive with the weights
}

TEST(GgufModel, MissingKeysTakeLlamaCppDefaults) {
    // a file writer without head_count_kv, key_length, rope.freq_base
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.context_length", 64);
    w.set_u32("llama.embedding_length", 64);
    w.set_u32("llama.feed_forward_length", 32);
    w.set_u32("llama.block_count", 1);
    w.set_u32("llama.attention.head_count", 4);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    const auto add = [&](const std::string& name, std::vector<std::int64_t> ne) {
        std::int64_t n = 1;
        for (auto d : ne) n *= d;
        w.add_tensor(name, ne, GgmlType::F32, std::vector<std::uint8_t>(std::size_t(n) * 4, 0));
    };
    add("token_embd.weight", {64, 10});
    add("output_norm.weight", {64});
    for (const char* n : {"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"}) add(n, {64});
    for (const char* n : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight"})
        add(n, {64, 64});
    add("blk.0.ffn_gate.weight", {64, 32});
    add("blk.0.ffn_up.weight", {64, 32});
    add("blk.0.ffn_down.weight", {32, 64});
    const std::string path = temp_path("defaults.gguf");
    w.write(path);
    const ModelConfig c = load_gguf_model(path).weights.config;
    EXPECT_EQ(c.n_kv_head, 4);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.rope_theta, 10000.0f);
    EXPECT_EQ(c.name, "defaults");  // no general.name: the file name
    EXPECT_TRUE(c.tied_output);
}

TEST(GgufModel, Qwen2HasBiasesAndNeoxPairs) {
    TinyModel t;
    t.arch = "qwen2";
    t.bias = true;
    const LoadedModel m = load_gguf_model(t.write("tiny_qwen2"));
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(c.arch, ModelArch::qwen2);
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_EQ(c.rope_pairs, RopePairs::neox);
    const LayerWeights& l = m.weights.layers[1];
    ASSERT_EQ(l.bq.size(), 256u);
    ASSERT_EQ(l.bk.size(), 128u);
    ASSERT_EQ(l.bv.size(), 128u);
    EXPECT_EQ(l.bk[17], value_at("blk.1.attn_k.bias", 17));

    t.skip.insert("blk.1.attn_v.bias");
    const std::string msg = error_of([&] { load_gguf_model(t.write("qwen2_no_bias")); });
    EXPECT_NE(msg.find("'blk.1.attn_v.bias' is missing"), std::string::npos) << msg;

    // a llama file with q/k/v biases loads them too
    TinyModel lb;
    lb.bias = true;
    EXPECT_TRUE(load_gguf_model(lb.write("llama_bias")).weights.config.qkv_bias);
}

TEST(GgufModel, RopeFrequencyFactorsAndScaling) {
    TinyModel t;
    t.extra.push_back({"rope_freqs.weight", {64}});
    const LoadedModel m = load_gguf_model(t.write("rope_freqs"));
    ASSERT_EQ(m.weights.rope_freq_factors.size(), 64u);
    EXPECT_EQ(m.weights.rope_freq_factors[10], value_at("rope_freqs.weight", 10));
    t.nan_at_3.insert("rope_freqs.weight");  // a divisor of NaN would make every angle of pair 3 NaN
    const LoadedModel bad = load_gguf_model(t.write("rope_freqs_nan"));
    EXPECT_NE(error_of([&] { rope_inverse_frequencies(bad.weights); }).find("rope_freqs: factor 3 is nan"),
              std::string::npos);
    t.nan_at_3.clear();

    t.extra.clear();
    t.meta = [](GgufWriter& w) {
        w.set_string("llama.rope.scaling.type", "linear");
        w.set_f32("llama.rope.scaling.factor", 4.0f);
        w.set_u32("llama.rope.scaling.original_context_length", 2048);
    };
    RopeScaling s = load_gguf_model(t.write("rope_linear")).weights.config.rope_scaling;
    EXPECT_EQ(s.kind, RopeScaling::Kind::linear);
    EXPECT_EQ(s.factor, 4.0f);
    EXPECT_EQ(s.original_context, 2048);

    t.meta = [](GgufWriter& w) { w.set_f32("llama.rope.scale_linear", 2.0f); };  // older key, type defaults to linear
    s = load_gguf_model(t.write("rope_scale_linear")).weights.config.rope_scaling;
    EXPECT_EQ(s.kind, RopeScaling::Kind::linear);
    EXPECT_EQ(s.factor, 2.0f);

    t.meta = [](GgufWriter& w) {
        w.set_string("llama.rope.scaling.type", "llama3");
        w.set_f32("llama.rope.scaling.factor", 8.0f);
        w.set_f32("llama.rope.scaling.low_freq_factor", 1.0f);
        w.set_f32("llama.rope.scaling.high_freq_factor", 4.0f);
        w.set_u32("llama.rope.scaling.original_context_length", 8192);
    };
    s = load_gguf_model(t.write("rope_llama3")).weights.config.rope_scaling;
    EXPECT_EQ(s.kind, RopeScaling::Kind::llama3);
    EXPECT_EQ(s.factor, 8.0f);
    EXPECT_EQ(s.high_freq_factor, 4.0f);
    EXPECT_EQ(s.original_context, 8192);

    t.meta = [](GgufWriter& w) {  // the llama3 rule divides by high - low
        w.set_string("llama.rope.scaling.type", "llama3");
        w.set_f32("llama.rope.scaling.factor", 8.0f);
        w.set_f32("llama.rope.scaling.low_freq_factor", 4.0f);
        w.set_f32("llama.rope.scaling.high_freq_factor", 4.0f);
    };
    EXPECT_NE(error_of([&] { load_gguf_model(t.write("rope_llama3_equal")); }).find("high_freq_factor"),
              std::string::npos);

    t.meta = [](GgufWriter& w) {
        w.set_string("llama.rope.scaling.type", "yarn");
        w.set_f32("llama.rope.scaling.factor", 4.0f);
    };
    const std::string msg = error_of([&] { load_gguf_model(t.write("rope_yarn")); });
    EXPECT_NE(msg.find("'yarn' is not supported"), std::string::npos) << msg;
}

TEST(GgufModel, BadModelsAreErrorsNamingTheProblem) {
    const auto load_error = [](const TinyModel& t, const std::string& name) {
        return error_of([&] { load_gguf_model(t.write(name)); });
    };
    {
        TinyModel t;
        t.types["blk.0.attn_q.weight"] = GgmlType::Q5_K;
        const std::string msg = load_error(t, "q5k");
        EXPECT_NE(msg.find("Q5_K"), std::string::npos) << msg;
        EXPECT_NE(msg.find("blk.0.attn_q.weight"), std::string::npos) << msg;
        // the file itself is a valid GGUF: only the model loader refuses it
        EXPECT_EQ(GgufFile(temp_path("q5k.gguf")).tensor("blk.0.attn_q.weight").type, GgmlType::Q5_K);
    }
    {
        TinyModel t;
        t.arch = "gpt2";
        const std::string msg = load_error(t, "gpt2");
        EXPECT_NE(msg.find("architecture 'gpt2' is not supported"), std::string::npos) << msg;
    }
    {
        TinyModel t;
        t.skip.insert("blk.1.ffn_up.weight");
        const std::string msg = load_error(t, "missing");
        EXPECT_NE(msg.find("'blk.1.ffn_up.weight' is missing"), std::string::npos) << msg;
    }
    {
        TinyModel t;
        t.shapes["blk.0.attn_k.weight"] = {256, 256};
        const std::string msg = load_error(t, "shape");
        EXPECT_NE(msg.find("'blk.0.attn_k.weight' has shape [256, 256], expected [256, 128]"), std::string::npos) << msg;
    }
    {
        TinyModel t;
        t.shapes["token_embd.weight"] = {128, 64};
        EXPECT_NE(load_error(t, "embd").find("token_embd.weight"), std::string::npos);
    }
    {
        TinyModel t;
        t.extra.push_back({"blk.0.ffn_gate_exps.weight", {256}});
        const std::string msg = load_error(t, "extra");
        EXPECT_NE(msg.find("'blk.0.ffn_gate_exps.weight' is not part of the llama architecture"), std::string::npos)
            << msg;
    }
    {
        TinyModel t;
        t.meta = [](GgufWriter& w) { w.set_u32("llama.expert_count", 8); };
        EXPECT_NE(load_error(t, "moe").find("mixture-of-experts"), std::string::npos);
    }
    {
        TinyModel t;
        t.meta = [](GgufWriter& w) { w.set_u32("llama.vocab_size", 65); };
        EXPECT_NE(load_error(t, "vocab").find("llama.vocab_size = 65"), std::string::npos);
    }
    {
        TinyModel t;
        t.meta = [](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 64); };
        EXPECT_NE(load_error(t, "partial_rope").find("partial RoPE"), std::string::npos);
    }
    {
        TinyModel t;
        t.meta = [](GgufWriter& w) { w.set_u32("llama.block_count", 0); };
        EXPECT_NE(load_error(t, "zero_layers").find("llama.block_count = 0"), std::string::npos);
    }
    {
        TinyModel t;
        t.meta = [](GgufWriter& w) { w.set_string("llama.embedding_length", "256"); };
        EXPECT_NE(load_error(t, "string_dim").find("'llama.embedding_length' is a string"), std::string::npos);
    }
    {
        TinyModel t;
        t.meta = [](GgufWriter& w) { w.set_u32("llama.attention.head_count_kv", 3); };  // 2 % 3 != 0
        EXPECT_NE(load_error(t, "gqa"), "");
    }
    {
        TinyModel t;
        t.L = 1;
        t.meta = [](GgufWriter& w) { w.set_u32("llama.block_count", 2); };  // layer 1's tensors absent
        EXPECT_NE(load_error(t, "layers").find("blk.1."), std::string::npos);
    }
    {
        TinyModel t;  // an infinite or tiny RoPE base: every angle NaN or 0
        t.meta = [](GgufWriter& w) { w.set_f32("llama.rope.freq_base", INFINITY); };
        EXPECT_NE(load_error(t, "inf_theta").find("rope_theta = inf"), std::string::npos);
        t.meta = [](GgufWriter& w) { w.set_f32("llama.rope.freq_base", 1e-30f); };
        EXPECT_NE(load_error(t, "tiny_theta").find("rope_theta"), std::string::npos);
    }
    {
        TinyModel t;  // a NaN in a norm vector is named (load_model checks the vectors it reads)
        t.nan_at_3.insert("blk.1.ffn_norm.weight");
        const std::string path = t.write("nan_norm");
        EXPECT_NE(error_of([&] { load_model(path); }).find("layer 1 ffn_norm holds nan at element 3"), std::string::npos);
    }
    {
        GgufWriter w;  // no general.architecture
        w.add_tensor("a", {4}, GgmlType::F32, std::vector<std::uint8_t>(16));
        const std::string path = temp_path("no_arch.gguf");
        w.write(path);
        EXPECT_NE(error_of([&] { load_gguf_model(path); }).find("general.architecture"), std::string::npos);
    }
}

// ---- aqpim synth --------------------------------------------------------------------------------

TEST(GgufSynth, SmallCustomShapeLoadsBack) {
    const std::string path = temp_path("synth_small.gguf");
    fs::remove(path);
    const std::string shape = "--shape custom --hidden 128 --ffn 256 --heads 4 --kv-heads 2 --layers 2 --vocab 300 --ctx 256";
    auto r = test::run_cli("synth " + shape + " --type q8_0 --seed 7 -o " + path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("parameters"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(std::to_string(fs::file_size(path)) + " bytes"), std::string::npos) << r.output;

    const LoadedModel m = load_gguf_model(path);
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(c.arch, ModelArch::llama);
    EXPECT_EQ(c.n_embd, 128);
    EXPECT_EQ(c.n_ff, 256);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.n_kv_head, 2);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_vocab, 300);
    EXPECT_EQ(c.n_ctx_train, 256);
    EXPECT_FALSE(c.tied_output);
    EXPECT_EQ(m.weights.layers[1].w_down.type, GgmlType::Q8_0);
    EXPECT_EQ(m.weights.token_embd.type, GgmlType::Q8_0);
    EXPECT_EQ(m.weights.layers[0].attn_norm, std::vector<float>(128, 1.0f));
    EXPECT_NE(r.output.find(std::to_string(c.n_params()) + " parameters"), std::string::npos) << r.output;
    ASSERT_NE(m.tokenizer, nullptr);
    EXPECT_EQ(m.tokenizer->n_vocab(), 300);
    EXPECT_EQ(m.tokenizer->bos(), 1);
    EXPECT_EQ(m.tokenizer->vocab().tokens[3], "<0x00>");

    // weights ~ N(0, 0.02)
    std::vector<float> row(128);
    double sum2 = 0;
    for (int r0 = 0; r0 < 64; ++r0) {
        dequantize_row(m.weights.layers[0].wq, r0, row.data());
        for (float x : row) sum2 += double(x) * x;
    }
    EXPECT_NEAR(std::sqrt(sum2 / (64 * 128)), 0.02, 0.002);

    // the same seed gives the same file; another seed another one
    const std::string again = temp_path("synth_again.gguf"), other = temp_path("synth_other.gguf");
    ASSERT_EQ(test::run_cli("synth " + shape + " --type q8_0 --seed 7 -o " + again).exit_code, 0);
    ASSERT_EQ(test::run_cli("synth " + shape + " --type q8_0 --seed 8 -o " + other).exit_code, 0);
    EXPECT_EQ(read_file(path), read_file(again));
    EXPECT_NE(read_file(path), read_file(other));
    // thread count does not change the weights
    ASSERT_EQ(test::run_cli("-t 1 synth " + shape + " --type q8_0 --seed 7 -o " + again).exit_code, 0);
    EXPECT_EQ(read_file(path), read_file(again));
}

TEST(GgufSynth, EveryTypeAndQwen2) {
    for (const char* type : {"f32", "f16", "q4_0"}) {
        const std::string path = temp_path(std::string("synth_") + type + ".gguf");
        auto r = test::run_cli(std::string("synth --hidden 64 --ffn 96 --heads 2 --kv-heads 1 --layers 1 --vocab 260 --type ") +
                               type + " -o " + path);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const LoadedModel m = load_gguf_model(path);
        const GgmlType expect = std::string(type) == "f32" ? GgmlType::F32
                                : std::string(type) == "f16" ? GgmlType::F16
                                                             : GgmlType::Q4_0;
        EXPECT_EQ(m.weights.layers[0].wq.type, expect) << type;
    }
    // K-quants: every row a multiple of the 256-value super-block; llama.cpp's file types (llama_file_type)
    for (const auto& [type, expect, file_type] : {std::tuple{"q4_k", GgmlType::Q4_K, 15}, std::tuple{"q6_k", GgmlType::Q6_K, 18}}) {
        const std::string path = temp_path(std::string("synth_") + type + ".gguf");
        auto r = test::run_cli(std::string("synth --hidden 256 --ffn 512 --heads 2 --kv-heads 1 --layers 1 --vocab 260 --type ") +
                               type + " -o " + path);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const LoadedModel m = load_gguf_model(path);
        EXPECT_EQ(m.weights.layers[0].w_down.type, expect) << type;
        EXPECT_EQ(GgufFile(path).get_int("general.file_type"), file_type) << type;
    }
    const std::string path = temp_path("synth_qwen2.gguf");
    auto r = test::run_cli("synth --arch qwen2 --hidden 64 --ffn 96 --heads 4 --kv-heads 2 --layers 2 --vocab 400 --type f16 -o " + path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const LoadedModel m = load_gguf_model(path);
    EXPECT_EQ(m.weights.config.arch, ModelArch::qwen2);
    EXPECT_TRUE(m.weights.config.qkv_bias);
    EXPECT_EQ(m.weights.layers[1].bk.size(), 32u);
}

TEST(GgufSynth, PresetShapesAndOverrides) {
    // A preset's fields apply unless overridden: qwen2-7b shrunk to a few layers of small width
    // keeps its architecture, rope theta, GQA ratio and eps.
    const std::string path = temp_path("synth_preset.gguf");
    auto r = test::run_cli("synth --shape qwen2-7b --hidden 112 --heads 4 --kv-heads 2 --ffn 64 --layers 1 --vocab 300 "
                           "--type f16 -o " + path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    GgufFile f(path);
    EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
    EXPECT_EQ(f.get_float("qwen2.rope.freq_base"), 1e6);
    EXPECT_EQ(f.get_int("qwen2.context_length"), 32768);
    EXPECT_NEAR(f.get_float("qwen2.attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);
    EXPECT_EQ(f.get_int("qwen2.attention.key_length"), 28);
    EXPECT_EQ(f.get_int("general.file_type"), 1);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_NE(f.find_tensor("blk.0.attn_q.bias"), nullptr);
}

TEST(GgufSynth, BadOptionsFailClearly) {
    const std::string out = " -o " + temp_path("synth_bad.gguf");
    const struct {
        std::string args, expect;
    } cases[] = {
        {"synth --type q5_k" + out, "--type 'q5_k'"},
        {"synth --shape llama9" + out, "--shape 'llama9'"},
        {"synth --heads 3 --kv-heads 2" + out, "--heads 3 is not a multiple of --kv-heads 2"},
        {"synth --layers 0" + out, "--layers 0"},
        {"synth --hidden 100 --heads 3 --kv-heads 1" + out, "--hidden 100 is not divisible by --heads 3"},
        {"synth --hidden 48 --heads 2 --type q4_0" + out, "multiple of 32"},
        {"synth --hidden 256 --ffn 1408 --heads 2 --type q4_k" + out, "--ffn = 1408 is not"},
        {"synth --vocab 100" + out, "--vocab 100"},
        {"synth --arch gpt2" + out, "--arch 'gpt2'"},
        {"synth --hidden 1000000000" + out, "n_embd"},
    };
    for (const auto& c : cases) {
        auto r = test::run_cli(c.args);
        EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    }
    EXPECT_NE(test::run_cli("synth --shape custom").exit_code, 0);  // no -o
    EXPECT_FALSE(fs::exists(temp_path("synth_bad.gguf")));
}

}  // namespace
}  // namespace aqpim
