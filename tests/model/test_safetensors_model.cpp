// Hugging Face safetensors checkpoints: both shared models load with the config's shape and the
// file's bytes (read here independently of the reader); sharded checkpoints equal single files;
// every dtype, tied/untied and qwen2 biases of a generated checkpoint; bad config.json, bad
// index.json and wrong tensors are errors naming what is wrong.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/model.h"
#include "support/cli.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTiny = test::shared_dir() + "/models/tinystories-656k";
const std::string kAusten = test::shared_dir() + "/models/austen-13m";

// ---- independent access to safetensors bytes ---------------------------------------------------

struct RawTensor {
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::string bytes;
};

json raw_header(const std::string& file) {
    std::ifstream f(file, std::ios::binary);
    std::uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string h(n, '\0');
    f.read(h.data(), std::streamsize(n));
    return json::parse(h);
}

RawTensor raw_tensor(const std::string& file, const std::string& name) {
    std::ifstream f(file, std::ios::binary);
    std::uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    const json t = raw_header(file).at(name);
    RawTensor r;
    r.dtype = t["dtype"];
    r.shape = t["shape"].get<std::vector<std::int64_t>>();
    const std::uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    r.bytes.resize(end - begin);
    f.seekg(std::streamoff(8 + n + begin));
    f.read(r.bytes.data(), std::streamsize(r.bytes.size()));
    return r;
}

float raw_value(const RawTensor& t, std::size_t i) {
    if (t.dtype == "F32") {
        float v;
        std::memcpy(&v, t.bytes.data() + 4 * i, 4);
        return v;
    }
    std::uint16_t h;
    std::memcpy(&h, t.bytes.data() + 2 * i, 2);
    return t.dtype == "F16" ? fp16_to_f32_scalar(h) : bf16_to_f32_scalar(h);
}

float weight_value(const WeightMatrix& W, std::int64_t r, std::int64_t c) {
    const std::uint8_t* p = W.row(r);
    if (W.type == GgmlType::F32) {
        float v;
        std::memcpy(&v, p + 4 * c, 4);
        return v;
    }
    std::uint16_t h;
    std::memcpy(&h, p + 2 * c, 2);
    return W.type == GgmlType::F16 ? fp16_to_f32_scalar(h) : bf16_to_f32_scalar(h);
}

// ---- generated checkpoints ---------------------------------------------------------------------

struct StTensor {
    std::string name, dtype;
    std::vector<std::int64_t> shape;
    std::string bytes;
};

void write_safetensors(const fs::path& path, const std::vector<StTensor>& tensors) {
    json h = json::object();
    std::uint64_t off = 0;
    for (const auto& t : tensors) {
        h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
        off += t.bytes.size();
    }
    std::string header = h.dump();
    header.resize((header.size() + 7) / 8 * 8, ' ');
    std::ofstream f(path, std::ios::binary);
    const std::uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), std::streamsize(n));
    for (const auto& t : tensors) f.write(t.bytes.data(), std::streamsize(t.bytes.size()));
}

void write_json(const fs::path& path, const json& j) { std::ofstream(path) << j.dump(2); }

json tiny_config() {
    return {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 16}, {"intermediate_size", 24},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"vocab_size", 32}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
            {"rope_theta", 500000.0}, {"tie_word_embeddings", false}};
}

/// Tensor values: tensor k's element i holds k + (i % 8) / 8 (exact in f16 and bf16 for k < 32).
StTensor make_tensor(const std::string& name, const std::string& dtype, std::vector<std::int64_t> shape, int k) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    StTensor t{name, dtype, shape, {}};
    const std::size_t eb = dtype == "F32" ? 4 : 2;
    t.bytes.resize(std::size_t(n) * eb);
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = float(k) + float(i % 8) / 8.0f;
        if (dtype == "F32") {
            std::memcpy(t.bytes.data() + 4 * i, &v, 4);
        } else {
            const std::uint16_t h = dtype == "F16" ? f32_to_fp16_scalar(v) : f32_to_bf16_scalar(v);
            std::memcpy(t.bytes.data() + 2 * i, &h, 2);
        }
    }
    return t;
}

std::vector<StTensor> tiny_tensors(const json& cfg, const std::string& dtype, bool lm_head, bool bias) {
    const std::int64_t E = cfg["hidden_size"], F = cfg["intermediate_size"], V = cfg["vocab_size"];
    const std::int64_t H = cfg["num_attention_heads"], KVH = cfg["num_key_value_heads"];
    const std::int64_t D = E / H, Q = H * D, KV = KVH * D;
    std::vector<StTensor> t;
    int k = 1;
    t.push_back(make_tensor("model.embed_tokens.weight", dtype, {V, E}, k++));
    for (int il = 0; il < int(cfg["num_hidden_layers"]); ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        t.push_back(make_tensor(p + "input_layernorm.weight", dtype, {E}, k++));
        t.push_back(make_tensor(p + "self_attn.q_proj.weight", dtype, {Q, E}, k++));
        t.push_back(make_tensor(p + "self_attn.k_proj.weight", dtype, {KV, E}, k++));
        t.push_back(make_tensor(p + "self_attn.v_proj.weight", dtype, {KV, E}, k++));
        t.push_back(make_tensor(p + "self_attn.o_proj.weight", dtype, {E, Q}, k++));
        if (bias) {
            t.push_back(make_tensor(p + "self_attn.q_proj.bias", dtype, {Q}, k++));
            t.push_back(make_tensor(p + "self_attn.k_proj.bias", dtype, {KV}, k++));
            t.push_back(make_tensor(p + "self_attn.v_proj.bias", dtype, {KV}, k++));
        }
        t.push_back(make_tensor(p + "post_attention_layernorm.weight", dtype, {E}, k++));
        t.push_back(make_tensor(p + "mlp.gate_proj.weight", dtype, {F, E}, k++));
        t.push_back(make_tensor(p + "mlp.up_proj.weight", dtype, {F, E}, k++));
        t.push_back(make_tensor(p + "mlp.down_proj.weight", dtype, {E, F}, k++));
    }
    t.push_back(make_tensor("model.norm.weight", dtype, {E}, k++));
    if (lm_head) t.push_back(make_tensor("lm_head.weight", dtype, {V, E}, k++));
    return t;
}

fs::path fresh_dir(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("aqpim_test_stmodel_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

fs::path tiny_model_dir(const std::string& name, const json& cfg, const std::string& dtype = "F32",
                        bool lm_head = true, bool bias = false) {
    const fs::path d = fresh_dir(name);
    write_json(d / "config.json", cfg);
    write_safetensors(d / "model.safetensors", tiny_tensors(cfg, dtype, lm_head, bias));
    return d;
}

/// The error message of f(), or "" if it did not throw aqpim::Error.
template <class Fn>
std::string error_of(Fn f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// ---- the shared models -------------------------------------------------------------------------

TEST(SafetensorsModel, LoadsTinyStories656K) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k");
    const LoadedModel m = load_safetensors_model(kTiny);
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(m.weights.format, "safetensors");
    EXPECT_EQ(c.arch, ModelArch::llama);
    EXPECT_EQ(c.name, "tinystories-656k");
    EXPECT_EQ(c.n_embd, 128);
    EXPECT_EQ(c.n_ff, 384);
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_head, 8);
    EXPECT_EQ(c.n_kv_head, 4);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.n_vocab, 2048);
    EXPECT_EQ(c.n_ctx_train, 512);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
    EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
    EXPECT_EQ(c.rope_pairs, RopePairs::neox);  // HF rotate_half, rows not permuted
    EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::none);
    EXPECT_TRUE(c.tied_output);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_EQ(m.weights.output.data, m.weights.token_embd.data);
    ASSERT_TRUE(m.tokenizer);
    EXPECT_EQ(m.tokenizer->n_vocab(), 2048);

    const std::string file = kTiny + "/model.safetensors";
    const auto& l1 = m.weights.layers[1];
    EXPECT_EQ(l1.wq.type, GgmlType::F32);
    const RawTensor q = raw_tensor(file, "model.layers.1.self_attn.q_proj.weight");
    ASSERT_EQ(q.bytes.size(), l1.wq.n_bytes());
    EXPECT_EQ(std::memcmp(q.bytes.data(), l1.wq.data, q.bytes.size()), 0);
    const RawTensor k = raw_tensor(file, "model.layers.1.self_attn.k_proj.weight");
    EXPECT_EQ(weight_value(l1.wk, 63, 127), raw_value(k, 63 * 128 + 127));
    const RawTensor down = raw_tensor(file, "model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(weight_value(m.weights.layers[0].w_down, 5, 383), raw_value(down, 5 * 384 + 383));
    // the one tied matrix is stored as lm_head.weight only
    EXPECT_FALSE(raw_header(file).contains("model.embed_tokens.weight"));
    const RawTensor embd = raw_tensor(file, "lm_head.weight");
    EXPECT_EQ(weight_value(m.weights.token_embd, 2047, 0), raw_value(embd, 2047 * 128));
    const RawTensor norm = raw_tensor(file, "model.norm.weight");
    for (int i = 0; i < 128; ++i) ASSERT_EQ(m.weights.output_norm[std::size_t(i)], raw_value(norm, std::size_t(i)));
}

TEST(SafetensorsModel, LoadsAusten13M) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    const LoadedModel m = load_safetensors_model(kAusten);
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(c.n_embd, 512);
    EXPECT_EQ(c.n_ff, 1408);
    EXPECT_EQ(c.n_layer, 4);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.n_kv_head, 2);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.n_vocab, 4096);
    EXPECT_EQ(c.n_ctx_train, 1024);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
    EXPECT_FALSE(c.tied_output);
    EXPECT_NE(m.weights.output.data, m.weights.token_embd.data);
    ASSERT_TRUE(m.tokenizer);  // from tokenizer.model
    EXPECT_EQ(m.tokenizer->n_vocab(), 4096);
    EXPECT_NEAR(double(c.n_params()), 16.0e6, 0.1e6);

    const std::string file = kAusten + "/model.safetensors";
    const ModelWeights& w = m.weights;
    EXPECT_EQ(w.output.type, GgmlType::F16);
    const RawTensor head = raw_tensor(file, "lm_head.weight");
    EXPECT_EQ(std::memcmp(head.bytes.data(), w.output.data, head.bytes.size()), 0);
    const RawTensor k = raw_tensor(file, "model.layers.3.self_attn.k_proj.weight");
    EXPECT_EQ(k.dtype, "F16");
    EXPECT_EQ(weight_value(w.layers[3].wk, 255, 511), raw_value(k, 255 * 512 + 511));
    EXPECT_EQ(weight_value(w.layers[3].wk, 128, 0), raw_value(k, 128 * 512));
    const RawTensor gate = raw_tensor(file, "model.layers.2.mlp.gate_proj.weight");
    EXPECT_EQ(weight_value(w.layers[2].w_gate, 1407, 17), raw_value(gate, 1407 * 512 + 17));
    const RawTensor up = raw_tensor(file, "model.layers.2.mlp.up_proj.weight");
    EXPECT_EQ(weight_value(w.layers[2].w_up, 3, 4), raw_value(up, 3 * 512 + 4));
    // f16 norms become f32 exactly
    const RawTensor n = raw_tensor(file, "model.layers.1.post_attention_layernorm.weight");
    for (int i = 0; i < 512; ++i) ASSERT_EQ(w.layers[1].ffn_norm[std::size_t(i)], raw_value(n, std::size_t(i)));
}

TEST(SafetensorsModel, ShardedEqualsSingleFile) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k");
    const fs::path d = fresh_dir("sharded");
    fs::copy_file(kTiny + "/config.json", d / "config.json");
    const std::string file = kTiny + "/model.safetensors";
    std::vector<StTensor> shard[2];
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    int i = 0;
    const json header = raw_header(file);
    for (auto it = header.begin(); it != header.end(); ++it, ++i) {
        if (it.key() == "__metadata__") continue;
        RawTensor r = raw_tensor(file, it.key());
        const int s = i % 2;
        shard[s].push_back({it.key(), r.dtype, r.shape, std::move(r.bytes)});
        index["weight_map"][it.key()] = s == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    write_safetensors(d / "model-00001-of-00002.safetensors", shard[0]);
    write_safetensors(d / "model-00002-of-00002.safetensors", shard[1]);
    write_json(d / "model.safetensors.index.json", index);

    const LoadedModel a = load_safetensors_model(kTiny), b = load_safetensors_model(d.string());
    EXPECT_FALSE(b.tokenizer);  // none beside the shards
    const auto same = [](const WeightMatrix& x, const WeightMatrix& y) {
        return x.type == y.type && x.rows == y.rows && x.cols == y.cols &&
               std::memcmp(x.data, y.data, x.n_bytes()) == 0;
    };
    EXPECT_TRUE(same(a.weights.token_embd, b.weights.token_embd));
    EXPECT_EQ(a.weights.output_norm, b.weights.output_norm);
    for (int il = 0; il < 2; ++il) {
        const LayerWeights &x = a.weights.layers[std::size_t(il)], &y = b.weights.layers[std::size_t(il)];
        EXPECT_EQ(x.attn_norm, y.attn_norm);
        EXPECT_EQ(x.ffn_norm, y.ffn_norm);
        EXPECT_TRUE(same(x.wq, y.wq) && same(x.wk, y.wk) && same(x.wv, y.wv) && same(x.wo, y.wo)) << il;
        EXPECT_TRUE(same(x.w_gate, y.w_gate) && same(x.w_up, y.w_up) && same(x.w_down, y.w_down)) << il;
    }

    // index pointing at a shard that does not exist / a tensor the shard lacks / outside the directory
    const auto with_index = [&](const std::function<void(json&)>& edit) {
        json j = index;
        edit(j);
        write_json(d / "model.safetensors.index.json", j);
        return error_of([&] { load_safetensors_model(d.string()); });
    };
    std::string e = with_index([](json& j) { j["weight_map"]["model.norm.weight"] = "model-00003-of-00003.safetensors"; });
    EXPECT_NE(e.find("model-00003-of-00003.safetensors"), std::string::npos) << e;
    e = with_index([&](json& j) {
        const std::string owner = index["weight_map"]["model.norm.weight"];
        j["weight_map"]["model.norm.weight"] = owner == "model-00001-of-00002.safetensors"
                                                   ? "model-00002-of-00002.safetensors"
                                                   : "model-00001-of-00002.safetensors";
    });
    EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
    e = with_index([](json& j) { j["weight_map"]["model.norm.weight"] = "../tinystories-656k/model.safetensors"; });
    EXPECT_NE(e.find("not a file name"), std::string::npos) << e;
    e = with_index([](json& j) { j["weight_map"]["model.norm.weight"] = 7; });
    EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
    e = with_index([](json& j) { j["weight_map"].erase("model.layers.1.mlp.up_proj.weight"); });
    EXPECT_NE(e.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << e;
    e = with_index([](json& j) { j["weight_map"] = json::array(); });
    EXPECT_NE(e.find("weight_map"), std::string::npos) << e;
    std::ofstream(d / "model.safetensors.index.json") << "{\"weight_map\": {";
    EXPECT_THROW(load_safetensors_model(d.string()), Error);
}

// ---- generated checkpoints ---------------------------------------------------------------------

TEST(SafetensorsModel, EveryDtypeZeroCopy) {
    for (const std::string dtype : {"F32", "F16", "BF16"}) {
        const fs::path d = tiny_model_dir("dtype_" + dtype, tiny_config(), dtype);
        const LoadedModel m = load_safetensors_model(d.string());
        const GgmlType want = dtype == "F32" ? GgmlType::F32 : dtype == "F16" ? GgmlType::F16 : GgmlType::BF16;
        const ModelWeights& w = m.weights;
        EXPECT_FALSE(m.tokenizer);
        EXPECT_FALSE(w.config.tied_output);
        EXPECT_FLOAT_EQ(w.config.rope_theta, 500000.0f);
        for (const WeightMatrix* W : {&w.token_embd, &w.output, &w.layers[1].wq, &w.layers[1].w_down}) {
            EXPECT_EQ(W->type, want) << dtype;
        }
        // tensor numbers in file order: embed 1, layer 0: 2..10, layer 1: 11..19, norm 20, lm_head 21
        const std::string file = (d / "model.safetensors").string();
        EXPECT_EQ(weight_value(w.token_embd, 0, 1), 1 + 1 / 8.0f);
        EXPECT_EQ(w.layers[0].attn_norm[3], 2 + 3 / 8.0f);
        EXPECT_EQ(weight_value(w.layers[0].wq, 0, 0), 3.0f);
        EXPECT_EQ(weight_value(w.layers[1].wk, 1, 2), 13 + 2 / 8.0f);  // element 18
        EXPECT_EQ(w.layers[1].ffn_norm[0], 16.0f);
        EXPECT_EQ(weight_value(w.layers[1].w_up, 0, 5), 18 + 5 / 8.0f);
        EXPECT_EQ(weight_value(w.layers[1].w_down, 0, 0), 19.0f);
        EXPECT_EQ(w.output_norm[0], 20.0f);
        EXPECT_EQ(weight_value(w.output, 0, 0), 21.0f);
        // zero copy: the matrix bytes are those of the file
        const RawTensor q = raw_tensor(file, "model.layers.1.self_attn.q_proj.weight");
        EXPECT_EQ(std::memcmp(q.bytes.data(), w.layers[1].wq.data, q.bytes.size()), 0);
    }
}

TEST(SafetensorsModel, TiedAndQwen2) {
    json cfg = tiny_config();
    // no lm_head tensor: tied even though the config says otherwise
    LoadedModel m = load_safetensors_model(tiny_model_dir("no_head", cfg, "F32", false).string());
    EXPECT_TRUE(m.weights.config.tied_output);
    EXPECT_EQ(m.weights.output.data, m.weights.token_embd.data);
    // tie_word_embeddings true: lm_head (if any) is ignored
    cfg["tie_word_embeddings"] = true;
    m = load_safetensors_model(tiny_model_dir("tied", cfg, "F32", true).string());
    EXPECT_TRUE(m.weights.config.tied_output);
    EXPECT_EQ(m.weights.output.data, m.weights.token_embd.data);

    // only lm_head.weight (a tied matrix saved under the head's name): it is the embedding too
    {
        const fs::path d = fresh_dir("head_only");
        write_json(d / "config.json", tiny_config());
        std::vector<StTensor> t = tiny_tensors(tiny_config(), "F32", true, false);
        std::erase_if(t, [](const StTensor& x) { return x.name == "model.embed_tokens.weight"; });
        write_safetensors(d / "model.safetensors", t);
        m = load_safetensors_model(d.string());
        EXPECT_TRUE(m.weights.config.tied_output);
        EXPECT_EQ(m.weights.output.data, m.weights.token_embd.data);
        EXPECT_EQ(weight_value(m.weights.token_embd, 0, 0), 21.0f);
    }

    cfg = tiny_config();
    cfg["architectures"] = {"Qwen2ForCausalLM"};
    m = load_safetensors_model(tiny_model_dir("qwen2", cfg, "BF16", true, true).string());
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(c.arch, ModelArch::qwen2);
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_EQ(c.rope_pairs, RopePairs::neox);
    ASSERT_EQ(m.weights.layers[1].bq.size(), 16u);
    ASSERT_EQ(m.weights.layers[1].bk.size(), 8u);
    ASSERT_EQ(m.weights.layers[1].bv.size(), 8u);
    // layer 1 tensors: 14 + (norm, q, k, v, o, bq, bk, bv, ...) -> bq is 19, bk 20, bv 21
    EXPECT_EQ(m.weights.layers[1].bq[2], 19 + 2 / 8.0f);
    EXPECT_EQ(m.weights.layers[1].bk[0], 20.0f);
    EXPECT_EQ(m.weights.layers[1].bv[7], 21 + 7 / 8.0f);
    // a qwen2 checkpoint without its biases
    EXPECT_NE(error_of([&] { load_safetensors_model(tiny_model_dir("qwen2_nobias", cfg).string()); })
                  .find("self_attn.q_proj.bias"),
              std::string::npos);
    // Mistral is a Llama to us
    cfg = tiny_config();
    cfg["architectures"] = {"MistralForCausalLM"};
    EXPECT_EQ(load_safetensors_model(tiny_model_dir("mistral", cfg).string()).weights.config.arch, ModelArch::llama);
}

TEST(SafetensorsModel, RopeScaling) {
    json cfg = tiny_config();
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    RopeScaling s = load_safetensors_model(tiny_model_dir("llama3", cfg).string()).weights.config.rope_scaling;
    EXPECT_EQ(s.kind, RopeScaling::Kind::llama3);
    EXPECT_EQ(s.factor, 8.0f);
    EXPECT_EQ(s.low_freq_factor, 1.0f);
    EXPECT_EQ(s.high_freq_factor, 4.0f);
    EXPECT_EQ(s.original_context, 8192);
    cfg["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    s = load_safetensors_model(tiny_model_dir("linear", cfg).string()).weights.config.rope_scaling;
    EXPECT_EQ(s.kind, RopeScaling::Kind::linear);
    EXPECT_EQ(s.factor, 2.0f);
    cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    EXPECT_NE(error_of([&] { load_safetensors_model(tiny_model_dir("yarn", cfg).string()); }).find("yarn"),
              std::string::npos);
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
    EXPECT_NE(error_of([&] { load_safetensors_model(tiny_model_dir("llama3_bad", cfg).string()); })
                  .find("low_freq_factor"),
              std::string::npos);
}

TEST(SafetensorsModel, BadConfigsAreErrorsNamingTheField) {
    const fs::path d = fresh_dir("bad_config");
    write_safetensors(d / "model.safetensors", tiny_tensors(tiny_config(), "F32", true, false));
    const auto error_for = [&](const json& cfg) {
        write_json(d / "config.json", cfg);
        return error_of([&] { load_safetensors_model(d.string()); });
    };
    EXPECT_EQ(error_for(tiny_config()), "");  // the generated model itself is fine
    for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                              "vocab_size", "architectures"}) {
        json cfg = tiny_config();
        cfg.erase(field);
        const std::string e = error_for(cfg);
        EXPECT_NE(e.find(field), std::string::npos) << field << ": " << e;
    }
    const std::vector<std::pair<json, std::string>> cases = {
        {"128", "hidden_size"}, {128.5, "hidden_size"}, {true, "hidden_size"}, {-16, "hidden_size"},
        {0, "hidden_size"}, {std::uint64_t(1) << 63, "hidden_size"}, {json::array(), "hidden_size"},
    };
    for (const auto& [value, field] : cases) {
        json cfg = tiny_config();
        cfg[field] = value;
        const std::string e = error_for(cfg);
        EXPECT_NE(e.find(field), std::string::npos) << value.dump() << ": " << e;
    }
    const auto error_with = [&](const char* key, const json& value) {
        json cfg = tiny_config();
        cfg[key] = value;
        return error_for(cfg);
    };
    EXPECT_NE(error_with("num_key_value_heads", 3).find("num_key_value_heads"), std::string::npos);
    EXPECT_NE(error_with("num_attention_heads", 5).find("num_attention_heads"), std::string::npos);  // 16 % 5
    EXPECT_NE(error_with("head_dim", 3).find("head_dim"), std::string::npos);
    EXPECT_NE(error_with("rms_norm_eps", "1e-5").find("rms_norm_eps"), std::string::npos);
    EXPECT_NE(error_with("rms_norm_eps", -1).find("rms_norm_eps"), std::string::npos);
    EXPECT_NE(error_with("rope_theta", 0).find("rope_theta"), std::string::npos);
    EXPECT_NE(error_with("tie_word_embeddings", "yes").find("tie_word_embeddings"), std::string::npos);
    EXPECT_NE(error_with("architectures", json{"GPT2LMHeadModel"}).find("GPT2LMHeadModel"), std::string::npos);
    EXPECT_NE(error_with("architectures", "LlamaForCausalLM").find("architectures"), std::string::npos);
    EXPECT_NE(error_with("rope_scaling", 2).find("rope_scaling"), std::string::npos);
    EXPECT_NE(error_with("hidden_act", "gelu").find("gelu"), std::string::npos);
    EXPECT_NE(error_with("attention_bias", true).find("attention_bias"), std::string::npos);
    EXPECT_NE(error_with("num_hidden_layers", 1 << 20).find("n_layer"), std::string::npos);  // validate()
    // a config that contradicts the tensors: the tensor is named
    EXPECT_NE(error_with("vocab_size", 33).find("model.embed_tokens.weight"), std::string::npos);
    EXPECT_NE(error_with("num_hidden_layers", 3).find("model.layers.2."), std::string::npos);
    // fewer layers than the checkpoint holds: refused, not run as a smaller model
    EXPECT_NE(error_with("num_hidden_layers", 1).find("tensor 'model.layers.1."), std::string::npos);
    // non-finite or absurd values, and hostile nesting
    EXPECT_NE(error_with("rope_theta", 1e308).find("rope_theta"), std::string::npos);
    EXPECT_NE(error_with("rope_scaling", json{{"rope_type", "linear"}, {"factor", 1e30}}).find("factor"),
              std::string::npos);
    std::ofstream(d / "config.json") << "{\"hidden_size\": " << std::string(100000, '[') << std::string(100000, ']') << "}";
    EXPECT_NE(error_of([&] { load_safetensors_model(d.string()); }).find("nested deeper"), std::string::npos);
    fs::remove(d / "config.json");
    fs::create_directories(d / "config.json");
    EXPECT_NE(error_of([&] { load_safetensors_model(d.string()); }).find("config.json: is a directory"),
              std::string::npos);
    fs::remove(d / "config.json");
    // null means absent: the defaults apply
    json cfg = tiny_config();
    cfg["head_dim"] = nullptr;
    cfg["rope_scaling"] = nullptr;
    cfg.erase("rms_norm_eps");
    EXPECT_EQ(error_for(cfg), "");
    // not JSON, not an object, missing
    std::ofstream(d / "config.json") << "{\"hidden_size\": ";
    EXPECT_NE(error_of([&] { load_safetensors_model(d.string()); }).find("config.json"), std::string::npos);
    write_json(d / "config.json", json::array({1, 2}));
    EXPECT_THROW(load_safetensors_model(d.string()), Error);
    fs::remove(d / "config.json");
    EXPECT_NE(error_of([&] { load_safetensors_model(d.string()); }).find("config.json"), std::string::npos);
    EXPECT_THROW(load_safetensors_model((d / "nonexistent").string()), Error);
}

TEST(SafetensorsModel, WrongTensorsAreErrorsNamingTheTensor) {
    const json cfg = tiny_config();
    const fs::path d = fresh_dir("bad_tensor");
    write_json(d / "config.json", cfg);
    const auto error_for = [&](const std::function<void(std::vector<StTensor>&)>& edit) {
        std::vector<StTensor> t = tiny_tensors(cfg, "F32", true, false);
        edit(t);
        write_safetensors(d / "model.safetensors", t);
        return error_of([&] { load_safetensors_model(d.string()); });
    };
    const auto find = [](std::vector<StTensor>& t, const std::string& name) -> StTensor& {
        for (auto& x : t)
            if (x.name == name) return x;
        throw std::runtime_error("no " + name);
    };
    const std::string k = "model.layers.1.self_attn.k_proj.weight";
    std::string e = error_for([&](auto& t) { find(t, k).shape = {16, 8}; });  // transposed
    EXPECT_NE(e.find(k), std::string::npos) << e;
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
    e = error_for([&](auto& t) { find(t, "model.norm.weight").shape = {4, 4}; });
    EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
    e = error_for([&](auto& t) {
        StTensor& x = find(t, k);
        x.dtype = "I32";
    });
    EXPECT_NE(e.find("I32"), std::string::npos) << e;
    e = error_for([&](auto& t) { std::erase_if(t, [](const StTensor& x) { return x.name == "model.layers.0.mlp.up_proj.weight"; }); });
    EXPECT_NE(e.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << e;
    e = error_for([&](auto& t) {
        StTensor& x = find(t, "lm_head.weight");
        x.shape = {31, 16};
        x.bytes.resize(31 * 16 * 4);
    });
    EXPECT_NE(e.find("lm_head.weight"), std::string::npos) << e;
    // a tensor the model does not use is refused; the RoPE frequencies older checkpoints carry are not
    const auto extra = [](const std::string& name) {
        return [name](std::vector<StTensor>& t) { t.push_back(StTensor{name, "F32", {4}, std::string(16, '\0')}); };
    };
    e = error_for(extra("model.vision_tower.proj.weight"));
    EXPECT_NE(e.find("tensor 'model.vision_tower.proj.weight' is not part of the model"), std::string::npos) << e;
    EXPECT_EQ(error_for(extra("model.layers.0.self_attn.rotary_emb.inv_freq")), "");
    // a truncated file
    std::vector<StTensor> t = tiny_tensors(cfg, "F32", true, false);
    write_safetensors(d / "model.safetensors", t);
    fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 3);
    EXPECT_THROW(load_safetensors_model(d.string()), Error);
    fs::remove(d / "model.safetensors");
    EXPECT_NE(error_of([&] { load_safetensors_model(d.string()); }).find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace aqpim
