// PerfModel: a decoder's shape from a preset or a model file's header (include/aqpim/perf_model.h).

#include "aqpim/perf_model.h"

#include <filesystem>
#include <fstream>

#include "aqpim/error.h"
#include "model/hf_config.h"

namespace aqpim {
namespace fs = std::filesystem;

void PerfModel::validate() const {
    const auto positive = [&](const char* field, std::int64_t v) {
        AQPIM_CHECK(v > 0, "{}: field {}: must be > 0, is {}", origin, field, v);
    };
    positive("n_embd", n_embd);
    positive("n_ff", n_ff);
    positive("n_layer", n_layer);
    positive("n_head", n_head);
    positive("n_kv_head", n_kv_head);
    positive("head_dim", head_dim);
    positive("n_vocab", n_vocab);
    positive("n_expert", n_expert);
    positive("n_expert_used", n_expert_used);
    AQPIM_CHECK(n_head % n_kv_head == 0, "{}: field n_kv_head: n_head {} is not a multiple of n_kv_head {}", origin,
                n_head, n_kv_head);
    AQPIM_CHECK(n_expert_used <= n_expert, "{}: field n_expert_used: {} exceeds n_expert {}", origin, n_expert_used,
                n_expert);
    AQPIM_CHECK(weight_bits > 0 && weight_bits <= 32, "{}: field weight_bits: must be in (0, 32], is {}", origin,
                weight_bits);
}

std::int64_t PerfModel::attn_params_per_layer() const {
    const std::int64_t q = std::int64_t(n_head) * head_dim, kv = std::int64_t(n_kv_head) * head_dim;
    return std::int64_t(n_embd) * (q + 2 * kv) + q * n_embd + (qkv_bias ? q + 2 * kv : 0);
}

std::int64_t PerfModel::expert_params_per_layer() const { return 3LL * n_embd * n_ff; }

namespace {
std::int64_t params_with_experts(const PerfModel& m, int experts) {
    const std::int64_t router = m.n_expert > 1 ? std::int64_t(m.n_embd) * m.n_expert : 0;
    const std::int64_t per_layer = m.attn_params_per_layer() + experts * m.expert_params_per_layer() + router + 2LL * m.n_embd;
    const std::int64_t embd = std::int64_t(m.n_vocab) * m.n_embd;
    return per_layer * m.n_layer + embd * (m.tied_output ? 1 : 2) + m.n_embd;
}
}  // namespace

std::int64_t PerfModel::n_params_total() const { return params_with_experts(*this, n_expert); }
std::int64_t PerfModel::n_params_active() const { return params_with_experts(*this, n_expert_used); }

KvShape PerfModel::kv_shape() const {
    KvShape s;
    s.n_layer = n_layer;
    s.n_kv_head = n_kv_head;
    s.head_dim = head_dim;
    s.rope_pairs = RopePairs::neox;
    return s;
}

PerfModel perf_model_from_preset(const Preset& p) {
    PerfModel m;
    m.name = p.name();
    m.origin = p.origin();
    m.description = p.description();
    constexpr std::int64_t kMax = 1 << 24;
    m.n_embd = int(p.count("n_embd", kMax));
    m.n_ff = int(p.count("n_ff", kMax));
    m.n_layer = int(p.count("n_layer", kMax));
    m.n_head = int(p.count("n_head", kMax));
    m.n_kv_head = int(p.count("n_kv_head", kMax));
    m.n_vocab = int(p.count("n_vocab", kMax));
    m.head_dim = p.has("head_dim") ? int(p.count("head_dim", kMax)) : 0;
    if (m.head_dim == 0) {
        if (m.n_embd % m.n_head != 0) p.fail("head_dim", fmt::format("missing, and n_embd {} is not a multiple of n_head {}", m.n_embd, m.n_head));
        m.head_dim = m.n_embd / m.n_head;
    }
    if (m.n_head % m.n_kv_head != 0)
        p.fail("n_kv_head", fmt::format("n_head {} is not a multiple of n_kv_head {}", m.n_head, m.n_kv_head));
    m.n_expert = p.has("n_expert") ? int(p.count("n_expert", 1024)) : 1;
    m.n_expert_used = p.has("n_expert_used") ? int(p.count("n_expert_used", 1024)) : 1;
    if (m.n_expert_used > m.n_expert)
        p.fail("n_expert_used", fmt::format("{} exceeds n_expert {}", m.n_expert_used, m.n_expert));
    m.n_ctx_train = p.has("n_ctx_train") ? p.count("n_ctx_train") : 0;
    if (p.has("weight_bits")) {
        m.weight_bits = p.positive("weight_bits");
        if (m.weight_bits > 32) p.fail("weight_bits", fmt::format("must be <= 32, is {}", m.weight_bits));
    }
    m.qkv_bias = p.flag("qkv_bias", false);
    m.tied_output = p.flag("tied_output", false);
    m.source = p.origin() + " (shapes: " + p.source("n_embd") + ", ...)";
    m.validate();
    return m;
}

PerfModel perf_model_from_config(const ModelConfig& c, const std::string& origin) {
    PerfModel m;
    m.name = c.name.empty() ? fs::path(origin).filename().string() : c.name;
    m.origin = origin;
    m.n_embd = c.n_embd;
    m.n_ff = c.n_ff;
    m.n_layer = c.n_layer;
    m.n_head = c.n_head;
    m.n_kv_head = c.n_kv_head;
    m.head_dim = c.head_dim;
    m.n_vocab = c.n_vocab;
    m.qkv_bias = c.qkv_bias;
    m.tied_output = c.tied_output;
    m.n_ctx_train = c.n_ctx_train;
    m.validate();
    return m;
}

namespace {
bool has_gguf_magic(const fs::path& path) {
    char magic[4] = {};
    std::ifstream in(path, std::ios::binary);
    in.read(magic, 4);
    return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}
}  // namespace

PerfModel perf_model_from_file(const std::string& path) {
    AQPIM_CHECK(fs::exists(path), "-m {}: no such file or directory", path);
    if (fs::is_directory(path) || fs::path(path).filename() == "config.json") {
        const fs::path cfg = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
        PerfModel m = perf_model_from_config(read_hf_config(cfg.string()), path);
        if (m.name == "config.json") m.name = cfg.parent_path().filename().string();
        m.source = cfg.string() + " (weights assumed 16-bit)";
        return m;
    }
    // GGUF and llama2.c are mapped: only the metadata and the small vectors are read.
    const LoadedModel lm = has_gguf_magic(path) ? load_gguf_model(path) : load_llama2c_model(path, "");
    PerfModel m = perf_model_from_config(lm.weights.config, path);
    m.weight_bits = double(lm.weights.weight_bytes()) * 8.0 / double(m.n_params_total());
    m.source = fmt::format("{} ({}; {:.3f} bits/weight as stored)", path, lm.weights.format, m.weight_bits);
    return m;
}

PerfModel find_perf_model(const std::string& name_or_path) {
    return perf_model_from_preset(find_preset("model", name_or_path));
}

}  // namespace aqpim
