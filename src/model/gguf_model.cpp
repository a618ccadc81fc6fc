// GGUF (`llama`, `qwen2`) -> ModelWeights. Hyper-parameters come from llama.cpp's metadata keys
// ({arch}.embedding_length, ...); weight matrices point into the mapping; every tensor's shape is
// checked against the configuration, and a tensor the architecture does not use is an error (as in
// llama.cpp), so a mixture-of-experts or otherwise different model is refused instead of run wrong.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/half.h"
#include "aqpim/model.h"

namespace aqpim {

namespace {

class GgufModelReader {
public:
    GgufModelReader(const GgufFile& file, std::string arch) : f_(file), arch_(std::move(arch)), ctx_("gguf " + file.path()) {}

    std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }

    /// A positive count that fits an int; `key` is the full key.
    int positive(const std::string& k, std::int64_t v) const {
        AQPIM_CHECK(v >= 1 && v <= std::numeric_limits<int>::max(), "{}: {} = {} is out of range [1, {}]", ctx_, k, v,
                    std::numeric_limits<int>::max());
        return int(v);
    }
    int required_dim(const std::string& suffix) const { return positive(key(suffix), f_.get_int(key(suffix))); }
    std::optional<int> optional_dim(const std::string& suffix) const {
        const auto v = f_.find_int(key(suffix));
        if (!v) return std::nullopt;
        return positive(key(suffix), *v);
    }
    std::optional<float> optional_float(const std::string& suffix) const {
        const auto v = f_.find_float(key(suffix));
        if (!v) return std::nullopt;
        return float(*v);
    }

    const GgufTensorInfo& tensor(const std::string& name, const std::vector<std::int64_t>& ne) {
        const GgufTensorInfo* t = f_.find_tensor(name);
        AQPIM_CHECK(t != nullptr, "{}: tensor '{}' is missing", ctx_, name);
        AQPIM_CHECK(t->ne == ne, "{}: tensor '{}' has shape [{}], expected [{}]", ctx_, name, fmt::join(t->ne, ", "),
                    fmt::join(ne, ", "));
        used_.insert(name);
        return *t;
    }

    /// [rows][cols] weight matrix (GGUF ne = {cols, rows}), pointing into the mapping.
    WeightMatrix matrix(const std::string& name, std::int64_t rows, std::int64_t cols) {
        const GgufTensorInfo& t = tensor(name, {cols, rows});
        require_supported_type(t.type, fmt::format("{}: tensor '{}'", ctx_, name));
        WeightMatrix m;
        m.type = t.type;
        m.rows = rows;
        m.cols = cols;
        m.data = f_.tensor_data(t);
        return m;
    }

    /// [n] vector converted to f32.
    std::vector<float> vector(const std::string& name, std::int64_t n) {
        const GgufTensorInfo& t = tensor(name, {n});
        const std::uint8_t* src = f_.tensor_data(t);
        std::vector<float> out(static_cast<std::size_t>(n));
        switch (t.type) {
            case GgmlType::F32: std::memcpy(out.data(), src, out.size() * 4); break;
            case GgmlType::F16:
            case GgmlType::BF16: {
                std::vector<std::uint16_t> tmp(out.size());  // the mapping may not be 2-byte aligned
                std::memcpy(tmp.data(), src, tmp.size() * 2);
                if (t.type == GgmlType::F16)
                    fp16_to_f32(tmp.data(), out.data(), out.size());
                else
                    bf16_to_f32(tmp.data(), out.data(), out.size());
                break;
            }
            default:
                require_supported_type(t.type, fmt::format("{}: tensor '{}'", ctx_, name));
                dequantize(t.type, src, out.data(), n);
        }
        return out;
    }

    bool has_tensor(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

    /// Every tensor of the file must have been used.
    void check_all_used() const {
        for (const auto& t : f_.tensors())
            AQPIM_CHECK(used_.count(t.name), "{}: tensor '{}' is not part of the {} architecture as aqpim runs it", ctx_,
                        t.name, arch_);
    }

    const std::string& ctx() const { return ctx_; }

private:
    const GgufFile& f_;
    std::string arch_;
    std::string ctx_;
    std::set<std::string> used_;
};

RopeScaling read_rope_scaling(const GgufFile& f, const GgufModelReader& r) {
    RopeScaling s;
    const std::string type = f.find_string(r.key("rope.scaling.type")).value_or("linear");  // llama.cpp's default
    auto factor = r.optional_float("rope.scaling.factor");
    if (!factor) factor = r.optional_float("rope.scale_linear");  // older files
    if (const auto orig = r.optional_dim("rope.scaling.original_context_length")) s.original_context = *orig;
    if (type == "none") return s;
    if (type == "linear") {
        if (!factor || *factor == 0.0f || *factor == 1.0f) return s;
        AQPIM_CHECK(*factor > 0.0f, "{}: {} = {} must be positive", r.ctx(), r.key("rope.scaling.factor"), *factor);
        s.kind = RopeScaling::Kind::linear;
        s.factor = *factor;
        return s;
    }
    if (type == "llama3") {  // aqpim's keys for the Llama-3.1 rule when a file has no rope_freqs tensor
        AQPIM_CHECK(factor && *factor > 0.0f, "{}: rope scaling 'llama3' needs a positive {}", r.ctx(),
                    r.key("rope.scaling.factor"));
        s.kind = RopeScaling::Kind::llama3;
        s.factor = *factor;
        s.low_freq_factor = r.optional_float("rope.scaling.low_freq_factor").value_or(s.low_freq_factor);
        s.high_freq_factor = r.optional_float("rope.scaling.high_freq_factor").value_or(s.high_freq_factor);
        AQPIM_CHECK(s.low_freq_factor > 0.0f && s.high_freq_factor > s.low_freq_factor,
                    "{}: rope scaling 'llama3' needs 0 < low_freq_factor ({}) < high_freq_factor ({})", r.ctx(),
                    s.low_freq_factor, s.high_freq_factor);
        return s;
    }
    AQPIM_FAIL("{}: {} = '{}' is not supported (supported: none, linear, llama3)", r.ctx(), r.key("rope.scaling.type"),
               type);
}

}  // namespace

LoadedModel load_gguf_model(const std::string& path) {
    auto file = std::make_shared<const GgufFile>(path);
    const GgufFile& f = *file;
    const std::string arch = f.get_string("general.architecture");
    LoadedModel out;
    ModelWeights& w = out.weights;
    ModelConfig& c = w.config;
    if (arch == "llama")
        c.arch = ModelArch::llama;
    else if (arch == "qwen2")
        c.arch = ModelArch::qwen2;
    else
        AQPIM_FAIL("gguf {}: architecture '{}' is not supported (supported: llama, qwen2)", path, arch);
    GgufModelReader r(f, arch);

    // ---- hyper-parameters
    if (const auto n_expert = f.find_int(r.key("expert_count")))
        AQPIM_CHECK(*n_expert == 0, "{}: {} = {}: mixture-of-experts models are not supported", r.ctx(),
                    r.key("expert_count"), *n_expert);
    c.name = f.find_string("general.name").value_or(std::filesystem::path(path).stem().string());
    c.n_embd = r.required_dim("embedding_length");
    c.n_ff = r.required_dim("feed_forward_length");
    c.n_layer = r.required_dim("block_count");
    c.n_head = r.required_dim("attention.head_count");
    c.n_kv_head = r.optional_dim("attention.head_count_kv").value_or(c.n_head);
    if (const auto hd = r.optional_dim("attention.key_length")) {
        c.head_dim = *hd;
    } else {
        AQPIM_CHECK(c.n_embd % c.n_head == 0, "{}: {} = {} is not divisible by {} = {} (and {} is absent)", r.ctx(),
                    r.key("embedding_length"), c.n_embd, r.key("attention.head_count"), c.n_head,
                    r.key("attention.key_length"));
        c.head_dim = c.n_embd / c.n_head;
    }
    if (const auto vd = r.optional_dim("attention.value_length"))
        AQPIM_CHECK(*vd == c.head_dim, "{}: {} = {} differs from the key length {} (not supported)", r.ctx(),
                    r.key("attention.value_length"), *vd, c.head_dim);
    if (const auto rd = r.optional_dim("rope.dimension_count"))
        AQPIM_CHECK(*rd == c.head_dim, "{}: {} = {}: partial RoPE (head_dim {}) is not supported", r.ctx(),
                    r.key("rope.dimension_count"), *rd, c.head_dim);
    c.n_ctx_train = r.required_dim("context_length");
    c.rms_eps = float(f.get_float(r.key("attention.layer_norm_rms_epsilon")));
    c.rope_theta = r.optional_float("rope.freq_base").value_or(10000.0f);
    c.rope_scaling = read_rope_scaling(f, r);
    c.rope_pairs = c.arch == ModelArch::qwen2 ? RopePairs::neox : RopePairs::interleaved;
    c.qkv_bias = c.arch == ModelArch::qwen2 || r.has_tensor("blk.0.attn_q.bias");

    const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
    AQPIM_CHECK(embd != nullptr, "{}: tensor 'token_embd.weight' is missing", r.ctx());
    AQPIM_CHECK(embd->ne.size() == 2 && embd->ne[0] == c.n_embd,
                "{}: tensor 'token_embd.weight' has shape [{}], expected [{}, n_vocab]", r.ctx(),
                fmt::join(embd->ne, ", "), c.n_embd);
    AQPIM_CHECK(embd->ne[1] <= std::numeric_limits<int>::max(), "{}: tensor 'token_embd.weight' has {} rows", r.ctx(),
                embd->ne[1]);
    c.n_vocab = int(embd->ne[1]);
    if (const auto nv = f.find_int(r.key("vocab_size")))
        AQPIM_CHECK(*nv == c.n_vocab, "{}: {} = {} but token_embd.weight has {} rows", r.ctx(), r.key("vocab_size"), *nv,
                    c.n_vocab);
    c.tied_output = !r.has_tensor("output.weight");
    c.validate();

    // ---- weights
    w.format = "gguf";
    w.storage.push_back(file);
    const std::int64_t E = c.n_embd, F = c.n_ff;
    const std::int64_t Q = std::int64_t(c.n_head) * c.head_dim, KV = std::int64_t(c.n_kv_head) * c.head_dim;
    w.token_embd = r.matrix("token_embd.weight", c.n_vocab, E);
    w.output_norm = r.vector("output_norm.weight", E);
    w.output = c.tied_output ? w.token_embd : r.matrix("output.weight", c.n_vocab, E);
    if (r.has_tensor("rope_freqs.weight")) w.rope_freq_factors = r.vector("rope_freqs.weight", c.head_dim / 2);
    w.layers.resize(std::size_t(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
        LayerWeights& l = w.layers[std::size_t(il)];
        const auto name = [il](const char* what) { return fmt::format("blk.{}.{}", il, what); };
        l.attn_norm = r.vector(name("attn_norm.weight"), E);
        l.wq = r.matrix(name("attn_q.weight"), Q, E);
        l.wk = r.matrix(name("attn_k.weight"), KV, E);
        l.wv = r.matrix(name("attn_v.weight"), KV, E);
        l.wo = r.matrix(name("attn_output.weight"), E, Q);
        if (c.qkv_bias) {
            l.bq = r.vector(name("attn_q.bias"), Q);
            l.bk = r.vector(name("attn_k.bias"), KV);
            l.bv = r.vector(name("attn_v.bias"), KV);
        }
        l.ffn_norm = r.vector(name("ffn_norm.weight"), E);
        l.w_gate = r.matrix(name("ffn_gate.weight"), F, E);
        l.w_up = r.matrix(name("ffn_up.weight"), F, E);
        l.w_down = r.matrix(name("ffn_down.weight"), E, F);
    }
    r.check_all_used();

    // ---- vocabulary
    // "no_vocab" / "none": llama.cpp's marker of a model without a vocabulary.
    const std::optional<std::string> vocab_model = f.find_string("tokenizer.ggml.model");
    if (vocab_model && *vocab_model != "no_vocab" && *vocab_model != "none") {
        out.tokenizer = Tokenizer::create(vocab_from_gguf(f));
        AQPIM_CHECK(out.tokenizer->n_vocab() == c.n_vocab,
                    "{}: the vocabulary has {} tokens but token_embd.weight has {} rows", r.ctx(),
                    out.tokenizer->n_vocab(), c.n_vocab);
    }
    return out;
}

}  // namespace aqpim
