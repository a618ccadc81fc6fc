// `aqpim synth`: a random-weight GGUF model of a real model's shape (llama.cpp's metadata keys and
// tensor names), for speed tests at realistic sizes without downloading weights. Tensors are
// generated row chunk by row chunk while the file is written, so an 8B model needs only a few MB
// of memory; the weights of a row depend only on (seed, tensor, row), never on threads or chunks.

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/model.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "aqpim/tokenizer.h"
#include "aqpim/weights.h"
#include "commands.h"

namespace aqpim::cli {

namespace {

/// A model shape as `synth` writes it (head_dim 0: n_embd / n_head).
struct SynthShape {
    std::string arch = "llama";
    int hidden = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, layers = 0, vocab = 0, ctx = 0;
    float rope_theta = 10000.0f;
    float rms_eps = 1e-5f;
};

/// Published shapes (config.json of each model); `custom` is a small model for tests.
SynthShape preset(const std::string& name) {
    SynthShape s;
    if (name == "llama2-7b") {
        s.hidden = 4096, s.ffn = 11008, s.heads = 32, s.kv_heads = 32, s.layers = 32, s.vocab = 32000, s.ctx = 4096;
    } else if (name == "llama3-8b") {
        s.hidden = 4096, s.ffn = 14336, s.heads = 32, s.kv_heads = 8, s.layers = 32, s.vocab = 128256, s.ctx = 8192;
        s.rope_theta = 500000.0f;
    } else if (name == "qwen2-7b") {
        s.arch = "qwen2";
        s.hidden = 3584, s.ffn = 18944, s.heads = 28, s.kv_heads = 4, s.layers = 28, s.vocab = 152064, s.ctx = 32768;
        s.rope_theta = 1000000.0f, s.rms_eps = 1e-6f;
    } else if (name == "custom") {
        s.hidden = 256, s.ffn = 768, s.heads = 4, s.kv_heads = 2, s.layers = 2, s.vocab = 512, s.ctx = 2048;
    } else {
        AQPIM_FAIL("--shape '{}' is not one of llama3-8b, llama2-7b, qwen2-7b, custom", name);
    }
    return s;
}

struct SynthArgs {
    std::string shape = "custom";
    std::string arch;
    std::optional<int> hidden, ffn, heads, kv_heads, head_dim, layers, vocab, ctx;
    std::string type = "f16";
    std::uint64_t seed = 42;
    std::string output;
};

GgmlType parse_type(const std::string& t) {
    return ggml_type_named(t, {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K},
                           "--type");
}

std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// n values ~ N(0, sigma) (Irwin-Hall of four 16-bit uniforms: mean 0, standard deviation sigma,
/// bounded at 3.46 sigma) for row `row` of the tensor with seed `tensor_seed`.
void gaussian_row(std::uint64_t tensor_seed, std::int64_t row, float sigma, float* out, std::int64_t n) {
    std::uint64_t state = tensor_seed ^ (std::uint64_t(row) * 0xd1b54a32d192ed03ull);
    splitmix64(state);
    // sum of 4 uniforms on [0, 65535]: mean 131070, variance 4 * (65536^2 - 1) / 12
    const float scale = sigma / std::sqrt(4.0f * (65536.0f * 65536.0f - 1.0f) / 12.0f);
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint64_t r = splitmix64(state);
        const std::uint32_t sum = std::uint32_t(r & 0xffff) + std::uint32_t((r >> 16) & 0xffff) +
                                  std::uint32_t((r >> 32) & 0xffff) + std::uint32_t(r >> 48);
        out[i] = (float(sum) - 131070.0f) * scale;
    }
}

/// llama-style (spm) vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then every string over
/// "▁a..z" by length (1, 2, 3, ...) until n_vocab tokens, scored so shorter pieces merge first.
VocabData synth_vocab(int n_vocab) {
    VocabData v;
    v.kind = VocabKind::spm;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {TokenType::unknown, TokenType::control, TokenType::control};
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(fmt::format("<0x{:02X}>", b));
        v.types.push_back(TokenType::byte);
    }
    static const std::vector<std::string> alphabet = [] {
        std::vector<std::string> a = {"\xe2\x96\x81"};  // U+2581, SentencePiece's space
        for (char ch = 'a'; ch <= 'z'; ++ch) a.emplace_back(1, ch);
        return a;
    }();
    std::vector<std::string> prev = {""};
    while (int(v.tokens.size()) < n_vocab) {
        std::vector<std::string> next;
        for (const auto& p : prev)
            for (const auto& a : alphabet) {
                next.push_back(p + a);
                if (int(v.tokens.size()) < n_vocab) {
                    v.tokens.push_back(next.back());
                    v.types.push_back(TokenType::normal);
                }
            }
        prev = std::move(next);
    }
    v.scores.resize(v.tokens.size(), 0.0f);
    for (std::size_t i = 259; i < v.tokens.size(); ++i) v.scores[i] = -float(i - 259);
    v.unk = 0, v.bos = 1, v.eos = 2;
    return v;
}

void run_synth(const SynthArgs& a) {
    Timer timer;
    AQPIM_CHECK(!a.output.empty(), "-o FILE.gguf is required");
    SynthShape s = preset(a.shape);
    if (!a.arch.empty()) {
        AQPIM_CHECK(a.arch == "llama" || a.arch == "qwen2", "--arch '{}' is not one of llama, qwen2", a.arch);
        s.arch = a.arch;
    }
    const GgmlType type = parse_type(a.type);
    const auto apply = [](int& field, const std::optional<int>& v, const char* opt) {
        if (!v) return;
        AQPIM_CHECK(*v >= 1, "{} {} must be at least 1", opt, *v);
        field = *v;
    };
    apply(s.hidden, a.hidden, "--hidden");
    apply(s.ffn, a.ffn, "--ffn");
    apply(s.heads, a.heads, "--heads");
    apply(s.kv_heads, a.kv_heads, "--kv-heads");
    apply(s.head_dim, a.head_dim, "--head-dim");
    apply(s.layers, a.layers, "--layers");
    apply(s.vocab, a.vocab, "--vocab");
    apply(s.ctx, a.ctx, "--ctx");
    AQPIM_CHECK(s.heads % s.kv_heads == 0, "--heads {} is not a multiple of --kv-heads {}", s.heads, s.kv_heads);
    if (s.head_dim == 0) {
        AQPIM_CHECK(s.hidden % s.heads == 0, "--hidden {} is not divisible by --heads {} (or give --head-dim)", s.hidden,
                    s.heads);
        s.head_dim = s.hidden / s.heads;
    }
    AQPIM_CHECK(s.vocab >= 260, "--vocab {} must be at least 260 (3 special and 256 byte tokens, then pieces)", s.vocab);

    ModelConfig c;
    c.arch = s.arch == "qwen2" ? ModelArch::qwen2 : ModelArch::llama;
    c.n_embd = s.hidden, c.n_ff = s.ffn, c.n_layer = s.layers, c.n_head = s.heads, c.n_kv_head = s.kv_heads;
    c.head_dim = s.head_dim, c.n_vocab = s.vocab, c.n_ctx_train = s.ctx, c.rms_eps = s.rms_eps;
    c.rope_theta = s.rope_theta, c.qkv_bias = c.arch == ModelArch::qwen2;
    c.validate();
    const std::int64_t E = c.n_embd, F = c.n_ff, Q = std::int64_t(c.n_head) * c.head_dim,
                       KV = std::int64_t(c.n_kv_head) * c.head_dim;
    const int block = ggml_type_traits(type).block_size;
    const auto check_cols = [&](std::int64_t cols, const char* what) {
        AQPIM_CHECK(cols % block == 0, "--type {} needs rows of a multiple of {} values, but {} = {} is not", a.type,
                    block, what, cols);
    };
    check_cols(E, "--hidden");
    check_cols(F, "--ffn");
    check_cols(Q, "--heads x --head-dim");

    GgufWriter w;
    const std::string arch = s.arch;
    const std::string name = fmt::format("synth-{}", a.shape);
    w.set_string("general.architecture", arch);
    w.set_string("general.name", name);
    w.set_u32("general.file_type", llama_file_type(type));
    if (type != GgmlType::F32 && type != GgmlType::F16) w.set_u32("general.quantization_version", 2);
    w.set_u32(arch + ".context_length", std::uint32_t(c.n_ctx_train));
    w.set_u32(arch + ".embedding_length", std::uint32_t(c.n_embd));
    w.set_u32(arch + ".feed_forward_length", std::uint32_t(c.n_ff));
    w.set_u32(arch + ".block_count", std::uint32_t(c.n_layer));
    w.set_u32(arch + ".attention.head_count", std::uint32_t(c.n_head));
    w.set_u32(arch + ".attention.head_count_kv", std::uint32_t(c.n_kv_head));
    w.set_u32(arch + ".attention.key_length", std::uint32_t(c.head_dim));
    w.set_u32(arch + ".attention.value_length", std::uint32_t(c.head_dim));
    w.set_f32(arch + ".rope.freq_base", c.rope_theta);
    w.set_u32(arch + ".rope.dimension_count", std::uint32_t(c.head_dim));
    w.set_f32(arch + ".attention.layer_norm_rms_epsilon", c.rms_eps);
    w.set_u32(arch + ".vocab_size", std::uint32_t(c.n_vocab));
    write_vocab_gguf(w, synth_vocab(c.n_vocab));

    // Weights ~ N(0, 0.02) (GPT-2/Llama initialisation: activations stay O(1) through the layers
    // at every width here), norms 1, biases N(0, 0.02); 1-D tensors F32 as llama.cpp keeps them.
    constexpr float kSigma = 0.02f;
    std::int64_t n_params = 0;
    std::uint64_t tensor_id = 0;
    const auto add_matrix = [&](const std::string& tname, std::int64_t rows, std::int64_t cols) {
        const std::uint64_t tseed = a.seed * 0x9e3779b97f4a7c15ull + (++tensor_id) * 0xbf58476d1ce4e5b9ull;
        const GgmlType t = type;
        const std::size_t row_bytes = ggml_row_bytes(t, cols);
        w.add_tensor(tname, {cols, rows}, t, [=](std::int64_t row0, std::int64_t n_rows, std::uint8_t* dst) {
            parallel_for(n_rows, [&](std::int64_t i) {
                std::vector<float> row(static_cast<std::size_t>(cols));
                gaussian_row(tseed, row0 + i, kSigma, row.data(), cols);
                std::uint8_t* out = dst + std::size_t(i) * row_bytes;
                if (t == GgmlType::F32)
                    std::memcpy(out, row.data(), row_bytes);
                else
                    quantize(t, row.data(), out, cols);
            });
        });
        n_params += rows * cols;
    };
    const auto add_vector = [&](const std::string& tname, std::int64_t n, bool ones) {
        const std::uint64_t tseed = a.seed * 0x9e3779b97f4a7c15ull + (++tensor_id) * 0xbf58476d1ce4e5b9ull;
        std::vector<float> v(static_cast<std::size_t>(n), 1.0f);
        if (!ones) gaussian_row(tseed, 0, kSigma, v.data(), n);
        std::vector<std::uint8_t> bytes(v.size() * 4);
        std::memcpy(bytes.data(), v.data(), bytes.size());
        w.add_tensor(tname, {n}, GgmlType::F32, std::move(bytes));
        n_params += n;
    };
    add_matrix("token_embd.weight", c.n_vocab, E);
    for (int il = 0; il < c.n_layer; ++il) {
        const auto t = [il](const char* what) { return fmt::format("blk.{}.{}", il, what); };
        add_vector(t("attn_norm.weight"), E, true);
        add_matrix(t("attn_q.weight"), Q, E);
        add_matrix(t("attn_k.weight"), KV, E);
        add_matrix(t("attn_v.weight"), KV, E);
        if (c.qkv_bias) {
            add_vector(t("attn_q.bias"), Q, false);
            add_vector(t("attn_k.bias"), KV, false);
            add_vector(t("attn_v.bias"), KV, false);
        }
        add_matrix(t("attn_output.weight"), E, Q);
        add_vector(t("ffn_norm.weight"), E, true);
        add_matrix(t("ffn_gate.weight"), F, E);
        add_matrix(t("ffn_up.weight"), F, E);
        add_matrix(t("ffn_down.weight"), E, F);
    }
    add_vector("output_norm.weight", E, true);
    add_matrix("output.weight", c.n_vocab, E);

    const std::uint64_t bytes = w.file_bytes();
    fmt::print("writing {}: {} {}, {} layers, hidden {}, ffn {}, {} heads / {} KV heads of {}, vocab {}, {}\n", a.output,
               arch, name, c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_kv_head, c.head_dim, c.n_vocab, a.type);
    std::fflush(stdout);
    w.write(a.output);
    fmt::print("wrote {}: {} parameters ({}), {} bytes ({:.2f} GiB) in {:.1f} s\n", a.output, n_params,
               n_params >= 1000000000 ? fmt::format("{:.2f} B", double(n_params) / 1e9)
                                      : fmt::format("{:.2f} M", double(n_params) / 1e6),
               bytes, double(bytes) / double(1ull << 30), timer.seconds());
}

}  // namespace

void add_synth_command(CLI::App& app) {
    auto args = std::make_shared<SynthArgs>();
    auto* cmd = app.add_subcommand("synth", "write a random-weight GGUF model of a real model's shape");
    cmd->add_option("--shape", args->shape, "llama3-8b, llama2-7b, qwen2-7b or custom (small)")->capture_default_str();
    cmd->add_option("--arch", args->arch, "override the shape's architecture: llama or qwen2 (q/k/v biases)");
    cmd->add_option("--hidden", args->hidden, "hidden size (overrides the shape's)");
    cmd->add_option("--ffn", args->ffn, "FFN inner size");
    cmd->add_option("--heads", args->heads, "query heads");
    cmd->add_option("--kv-heads", args->kv_heads, "KV heads (GQA)");
    cmd->add_option("--head-dim", args->head_dim, "head dimension (default hidden / heads)");
    cmd->add_option("--layers", args->layers, "layers");
    cmd->add_option("--vocab", args->vocab, "vocabulary size (at least 260)");
    cmd->add_option("--ctx", args->ctx, "training context length written to the file");
    cmd->add_option("--type", args->type, "weight matrix type: f32, f16, q8_0, q4_0, q4_k or q6_k (q4_k / q6_k: rows of a multiple of 256 values)")->capture_default_str();
    cmd->add_option("--seed", args->seed, "random seed")->capture_default_str();
    cmd->add_option("-o,--output", args->output, "output .gguf file")->required();
    cmd->callback([args] { run_synth(*args); });
}

}  // namespace aqpim::cli
