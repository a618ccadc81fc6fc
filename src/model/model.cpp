// ModelConfig checks, sizes, and load_model's choice of format.

#include "aqpim/model.h"

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "aqpim/error.h"
#include "aqpim/gguf.h"

namespace aqpim {

const char* model_arch_name(ModelArch arch) {
    switch (arch) {
        case ModelArch::llama: return "llama";
        case ModelArch::qwen2: return "qwen2";
    }
    return "?";
}

void ModelConfig::validate() const {
    // Bounds far beyond any published model, low enough that sizes computed from them never
    // overflow 64 bits.
    const auto in_range = [](const char* field, long long v, long long hi) {
        AQPIM_CHECK(v >= 1 && v <= hi, "model config: {} = {} is out of range [1, {}]", field, v, hi);
    };
    in_range("n_embd", n_embd, ModelLimits::dim);
    in_range("n_ff", n_ff, 4 * ModelLimits::dim);
    in_range("n_layer", n_layer, ModelLimits::layers);
    in_range("n_head", n_head, ModelLimits::heads);
    in_range("n_kv_head", n_kv_head, ModelLimits::heads);
    in_range("head_dim", head_dim, ModelLimits::head_dim);
    in_range("n_vocab", n_vocab, ModelLimits::vocab);
    in_range("n_ctx_train", n_ctx_train, ModelLimits::context);
    AQPIM_CHECK(n_head % n_kv_head == 0, "model config: n_head = {} is not a multiple of n_kv_head = {}", n_head,
                n_kv_head);
    AQPIM_CHECK(head_dim % 2 == 0, "model config: head_dim = {} must be even for RoPE", head_dim);
    AQPIM_CHECK(rms_eps > 0.0f && rms_eps < 1.0f, "model config: rms_eps = {} is not in (0, 1)", rms_eps);
    // RoPE: a base below 1 or an infinite one makes every angle 0 or NaN; no model uses either.
    AQPIM_CHECK(std::isfinite(rope_theta) && rope_theta >= 1.0f, "model config: rope_theta = {} is not a finite "
                "number >= 1", rope_theta);
    const RopeScaling& rs = rope_scaling;
    for (const auto& [field, v] : {std::pair{"rope scaling factor", rs.factor}, {"low_freq_factor", rs.low_freq_factor},
                                   {"high_freq_factor", rs.high_freq_factor}})
        AQPIM_CHECK(std::isfinite(v) && v > 0.0f && v <= 1e6f, "model config: {} = {} is not in (0, 1e6]", field, v);
    AQPIM_CHECK(rs.kind != RopeScaling::Kind::llama3 || rs.high_freq_factor > rs.low_freq_factor,
                "model config: llama3 rope scaling needs high_freq_factor ({}) > low_freq_factor ({})",
                rs.high_freq_factor, rs.low_freq_factor);
    AQPIM_CHECK(rs.original_context >= 1 && rs.original_context <= ModelLimits::context,
                "model config: rope scaling original context = {} is out of range [1, {}]", rs.original_context,
                ModelLimits::context);
}

std::int64_t ModelConfig::n_params() const {
    const std::int64_t q = std::int64_t(n_head) * head_dim, kv = std::int64_t(n_kv_head) * head_dim;
    std::int64_t per_layer = 2 * n_embd + n_embd * (q + 2 * kv) + q * n_embd + 3 * std::int64_t(n_embd) * n_ff;
    if (qkv_bias) per_layer += q + 2 * kv;
    std::int64_t total = per_layer * n_layer + std::int64_t(n_vocab) * n_embd + n_embd;
    if (!tied_output) total += std::int64_t(n_vocab) * n_embd;
    return total;
}

std::uint64_t ModelWeights::weight_bytes() const {
    const auto vec = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
    std::uint64_t b = token_embd.n_bytes() + vec(output_norm);
    if (output.data != token_embd.data) b += output.n_bytes();
    for (const LayerWeights& l : layers) {
        b += vec(l.attn_norm) + vec(l.ffn_norm) + vec(l.bq) + vec(l.bk) + vec(l.bv);
        for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) b += w->n_bytes();
    }
    return b;
}

namespace {

/// The llama2.c vocabulary next to a checkpoint: tokenizer.bin, else the only tok*.bin there.
std::string find_llama2c_tokenizer(const std::filesystem::path& checkpoint) {
    namespace fs = std::filesystem;
    const fs::path dir = checkpoint.parent_path().empty() ? fs::path(".") : checkpoint.parent_path();
    if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("tok", 0) == 0 && e.path().extension() == ".bin" && e.path() != checkpoint) found.push_back(e.path());
    }
    AQPIM_CHECK(found.size() == 1,
                "llama2.c checkpoint {}: {} vocabulary files (tokenizer.bin or tok*.bin) beside it; pass --tokenizer",
                checkpoint.string(), found.size());
    return found[0].string();
}

bool starts_with_gguf_magic(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::array<char, 4> magic{};
    f.read(magic.data(), 4);
    return f.gcount() == 4 && std::memcmp(magic.data(), "GGUF", 4) == 0;
}

}  // namespace

void pad_vocabulary(VocabData& v, int n_vocab, const std::string& source) {
    const std::size_t n = v.tokens.size();
    AQPIM_CHECK(n <= std::size_t(n_vocab), "{}: {} tokens, more than the model's vocabulary size {}", source, n, n_vocab);
    for (std::size_t id = n; id < std::size_t(n_vocab); ++id) {
        v.tokens.push_back(fmt::format("[PAD{}]", id));
        v.types.push_back(TokenType::unused);
        if (!v.scores.empty()) v.scores.push_back(-1000.0f);
    }
}

std::shared_ptr<const Tokenizer> load_tokenizer_file(const std::string& path, int n_vocab) {
    namespace fs = std::filesystem;
    AQPIM_CHECK(fs::is_regular_file(path), "tokenizer {}: no such file", path);
    const std::string ext = fs::path(path).extension().string();
    VocabData v;
    if (starts_with_gguf_magic(path))
        v = vocab_from_gguf(GgufFile(path));
    else if (ext == ".json")
        v = vocab_from_hf_tokenizer_json(path);
    else if (ext == ".model")
        v = vocab_from_sentencepiece_model(path);
    else
        v = vocab_from_llama2c(path, n_vocab);
    pad_vocabulary(v, n_vocab, path);
    return Tokenizer::create(std::move(v));
}

namespace {

/// The norm weights and biases are read into f32 vectors anyway; a NaN or Inf there would turn every
/// logit into NaN (and greedy decoding into token 0) without a word, so they are checked. The
/// matrices are not scanned (as llama.cpp without --check-tensors): that would read the whole file.
void check_vectors_finite(const ModelWeights& w, const std::string& path) {
    const auto check = [&](const std::vector<float>& v, const std::string& what) {
        for (std::size_t i = 0; i < v.size(); ++i)
            AQPIM_CHECK(std::isfinite(v[i]), "model {}: {} holds {} at element {}", path, what, v[i], i);
    };
    check(w.output_norm, "output_norm");
    for (std::size_t il = 0; il < w.layers.size(); ++il) {
        const LayerWeights& l = w.layers[il];
        for (const auto& [v, name] : {std::pair{&l.attn_norm, "attn_norm"}, {&l.ffn_norm, "ffn_norm"},
                                      {&l.bq, "q bias"}, {&l.bk, "k bias"}, {&l.bv, "v bias"}})
            check(*v, fmt::format("layer {} {}", il, name));
    }
}

}  // namespace

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
    namespace fs = std::filesystem;
    AQPIM_CHECK(fs::exists(path), "model {}: no such file or directory", path);
    LoadedModel m;
    if (fs::is_directory(path)) {
        m = load_safetensors_model(path);
    } else {
        // Opening a FIFO or device to look for a magic number could block forever.
        AQPIM_CHECK(fs::is_regular_file(path), "model {}: not a regular file or a directory", path);
        const std::uintmax_t size = fs::file_size(path);
        AQPIM_CHECK(size >= 8, "model {}: {} bytes, too short for a GGUF file or a llama2.c checkpoint", path, size);
        if (starts_with_gguf_magic(path)) m = load_gguf_model(path);
        else if (options.tokenizer_path.empty())
            m = load_llama2c_model(path, options.vocabulary ? find_llama2c_tokenizer(path) : std::string());
        else m = load_llama2c_model(path, "");
    }
    check_vectors_finite(m.weights, path);
    if (options.vocabulary && !options.tokenizer_path.empty()) m.tokenizer = load_tokenizer_file(options.tokenizer_path, m.weights.config.n_vocab);
    return m;
}

}  // namespace aqpim
