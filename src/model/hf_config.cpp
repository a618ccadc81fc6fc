#include "model/hf_config.h"

#include <cmath>
#include <fstream>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "aqpim/error.h"
#include "aqpim/json_integer.h"
#include "aqpim/file_io.h"

namespace aqpim {

namespace {

using nlohmann::json;

const json* field(const json& obj, const char* key) {
    auto it = obj.find(key);
    return (it == obj.end() || it->is_null()) ? nullptr : &*it;
}

/// An integer field in [lo, hi]; absent (or null) gives `fallback`, or an error if there is none.
int int_field(const json& obj, const char* key, const std::string& path, std::optional<int> fallback,
              std::int64_t lo = 1, std::int64_t hi = std::int64_t(1) << 30) {
    const json* v = field(obj, key);
    if (!v) {
        AQPIM_CHECK(fallback.has_value(), "{}: missing required field '{}'", path, key);
        return *fallback;
    }
    AQPIM_CHECK(v->is_number_integer(), "{}: field '{}' is {}, expected an integer", path, key, json_excerpt(*v));
    const std::optional<std::int64_t> x = json_integer_in(*v, lo, hi);
    AQPIM_CHECK(x, "{}: field '{}' = {} is out of range [{}, {}]", path, key, json_excerpt(*v), lo, hi);
    return int(*x);
}

double float_field(const json& obj, const char* key, const std::string& path, std::optional<double> fallback) {
    const json* v = field(obj, key);
    if (!v) {
        AQPIM_CHECK(fallback.has_value(), "{}: missing required field '{}'", path, key);
        return *fallback;
    }
    AQPIM_CHECK(v->is_number(), "{}: field '{}' is {}, expected a number", path, key, json_excerpt(*v));
    const double x = v->get<double>();
    AQPIM_CHECK(std::isfinite(x), "{}: field '{}' = {} is not finite", path, key, json_excerpt(*v));
    return x;
}

bool bool_field(const json& obj, const char* key, const std::string& path, bool fallback) {
    const json* v = field(obj, key);
    if (!v) return fallback;
    AQPIM_CHECK(v->is_boolean(), "{}: field '{}' is {}, expected true or false", path, key, json_excerpt(*v));
    return v->get<bool>();
}

std::optional<std::string> string_field(const json& obj, const char* key, const std::string& path) {
    const json* v = field(obj, key);
    if (!v) return std::nullopt;
    AQPIM_CHECK(v->is_string(), "{}: field '{}' is {}, expected a string", path, key, json_excerpt(*v));
    return v->get<std::string>();
}

ModelArch arch_of(const json& cfg, const std::string& path) {
    if (const json* a = field(cfg, "architectures")) {
        AQPIM_CHECK(a->is_array() && !a->empty(), "{}: field 'architectures' is {}, expected a non-empty array",
                    path, json_excerpt(*a));
        for (const auto& name : *a) {
            AQPIM_CHECK(name.is_string(), "{}: field 'architectures' holds {}, expected strings", path, json_excerpt(name));
            const std::string s = name.get<std::string>();
            if (s == "LlamaForCausalLM" || s == "MistralForCausalLM") return ModelArch::llama;
            if (s == "Qwen2ForCausalLM") return ModelArch::qwen2;
        }
        AQPIM_FAIL("{}: architectures {} are not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                   "Qwen2ForCausalLM)",
                   path, json_excerpt(*a));
    }
    const auto type = string_field(cfg, "model_type", path);
    AQPIM_CHECK(type.has_value(), "{}: missing required field 'architectures' (or 'model_type')", path);
    if (*type == "llama" || *type == "mistral") return ModelArch::llama;
    if (*type == "qwen2") return ModelArch::qwen2;
    AQPIM_FAIL("{}: model_type '{}' is not supported (supported: llama, mistral, qwen2)", path, *type);
}

RopeScaling rope_scaling_of(const json& cfg, const std::string& path) {
    RopeScaling rs;
    const json* r = field(cfg, "rope_scaling");
    if (!r) return rs;
    AQPIM_CHECK(r->is_object(), "{}: field 'rope_scaling' is {}, expected an object or null", path, json_excerpt(*r));
    std::optional<std::string> type = string_field(*r, "rope_type", path);
    if (!type) type = string_field(*r, "type", path);
    AQPIM_CHECK(type.has_value(), "{}: rope_scaling has no 'rope_type' (or 'type')", path);
    if (*type == "default") return rs;
    const std::string where = path + " (rope_scaling)";
    if (*type == "linear") {
        rs.kind = RopeScaling::Kind::linear;
    } else if (*type == "llama3") {
        rs.kind = RopeScaling::Kind::llama3;
        rs.low_freq_factor = float(float_field(*r, "low_freq_factor", where, std::nullopt));
        rs.high_freq_factor = float(float_field(*r, "high_freq_factor", where, std::nullopt));
        rs.original_context = int_field(*r, "original_max_position_embeddings", where, std::nullopt);
        AQPIM_CHECK(rs.low_freq_factor > 0 && rs.high_freq_factor > rs.low_freq_factor,
                    "{}: low_freq_factor {} and high_freq_factor {} must satisfy 0 < low < high", where,
                    rs.low_freq_factor, rs.high_freq_factor);
    } else {
        AQPIM_FAIL("{}: rope_scaling type '{}' is not supported (supported: linear, llama3)", path, *type);
    }
    rs.factor = float(float_field(*r, "factor", where, std::nullopt));
    AQPIM_CHECK(rs.factor >= 1.0f && rs.factor <= 1024.0f, "{}: factor {} is out of range [1, 1024]", where,
                rs.factor);
    return rs;
}

}  // namespace

ModelConfig parse_hf_config(const json& cfg, const std::string& path) {
    AQPIM_CHECK(cfg.is_object(), "{}: expected a JSON object", path);
    ModelConfig c;
    c.arch = arch_of(cfg, path);
    c.n_embd = int_field(cfg, "hidden_size", path, std::nullopt);
    c.n_ff = int_field(cfg, "intermediate_size", path, std::nullopt);
    c.n_layer = int_field(cfg, "num_hidden_layers", path, std::nullopt);
    c.n_head = int_field(cfg, "num_attention_heads", path, std::nullopt);
    c.n_kv_head = int_field(cfg, "num_key_value_heads", path, c.n_head);
    AQPIM_CHECK(c.n_head % c.n_kv_head == 0, "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                path, c.n_head, c.n_kv_head);
    if (!field(cfg, "head_dim"))
        AQPIM_CHECK(c.n_embd % c.n_head == 0,
                    "{}: hidden_size {} is not divisible by num_attention_heads {} (and there is no head_dim)", path,
                    c.n_embd, c.n_head);
    c.head_dim = int_field(cfg, "head_dim", path, c.n_embd / c.n_head);
    AQPIM_CHECK(c.head_dim % 2 == 0, "{}: head_dim {} is odd (RoPE rotates pairs of dims)", path, c.head_dim);
    c.n_vocab = int_field(cfg, "vocab_size", path, std::nullopt);
    c.n_ctx_train = int_field(cfg, "max_position_embeddings", path, 2048);
    c.rms_eps = float(float_field(cfg, "rms_norm_eps", path, 1e-6));
    AQPIM_CHECK(c.rms_eps > 0 && c.rms_eps < 1, "{}: rms_norm_eps {} is out of range (0, 1)", path, c.rms_eps);
    c.rope_theta = float(float_field(cfg, "rope_theta", path, 10000.0));
    AQPIM_CHECK(c.rope_theta > 1, "{}: rope_theta {} must be greater than 1", path, c.rope_theta);
    c.rope_scaling = rope_scaling_of(cfg, path);
    c.tied_output = bool_field(cfg, "tie_word_embeddings", path, false);
    c.rope_pairs = RopePairs::neox;  // HF checkpoints rotate halves (rotate_half), whatever the arch
    c.qkv_bias = c.arch == ModelArch::qwen2;
    if (c.arch == ModelArch::llama) {
        AQPIM_CHECK(!bool_field(cfg, "attention_bias", path, false),
                    "{}: attention_bias = true is not supported (q/k/v/o biases of a Llama)", path);
        AQPIM_CHECK(!bool_field(cfg, "mlp_bias", path, false), "{}: mlp_bias = true is not supported", path);
    }
    if (const auto act = string_field(cfg, "hidden_act", path))
        AQPIM_CHECK(*act == "silu", "{}: hidden_act '{}' is not supported (supported: silu)", path, *act);
    return c;
}

ModelConfig read_hf_config(const std::string& path) {
    return parse_hf_config(parse_json(read_whole_file(path, "model config"), path), path);
}

}  // namespace aqpim
