// `convert`: LoadedModel -> GGUF v3 with llama.cpp's keys and tensor names (see convert.h).

#include "aqpim/convert.h"

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/weights.h"

namespace aqpim {

namespace {

const char* pairs_name(RopePairs p) {
    return p == RopePairs::neox ? "NeoX" : p == RopePairs::interleaved ? "interleaved" : "unspecified";
}

bool is_target_type(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0;
}

std::vector<std::uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<std::uint8_t> b(v.size() * 4);
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

/// Collects tensors for the writer, converting matrices to the target type.
class TensorSink {
public:
    TensorSink(GgufWriter& writer, std::optional<GgmlType> target) : writer_(writer), target_(target) {}

    /// A matrix W [rows][cols] as GGUF ne = {cols, rows}; `rows_from` (if non-empty) gives the source
    /// row of each output row.
    void matrix(const std::string& name, const WeightMatrix& W, std::int64_t rows, std::int64_t cols,
                const std::vector<std::int64_t>& rows_from = {}) {
        AQPIM_CHECK(!W.empty() && W.rows == rows && W.cols == cols,
                    "convert: tensor {} is [{}][{}]{}, expected [{}][{}]", name, W.rows, W.cols,
                    W.empty() ? " without data" : "", rows, cols);
        const GgmlType out = target_.value_or(W.type);
        const GgmlTypeTraits tr = ggml_type_traits(out);
        AQPIM_CHECK(tr.block_size > 0 && W.cols % tr.block_size == 0,
                    "convert: tensor {} has {} columns, not a multiple of {}'s block of {}", name, W.cols,
                    ggml_type_name(out), tr.block_size);
        AQPIM_ASSERT(rows_from.empty() || std::int64_t(rows_from.size()) == W.rows);
        if (out != W.type) require_supported_type(W.type, "convert: tensor " + name);
        // streamed while writing: W points into the source model, alive until write() returns
        GgufWriter::RowGenerator generate = [W, out, rows_from, name](std::int64_t row0, std::int64_t n,
                                                                       std::uint8_t* dst) {
            const std::size_t out_row = ggml_row_bytes(out, W.cols);
            std::vector<float> tmp(out == W.type ? 0 : std::size_t(W.cols)), back(tmp.size());
            for (std::int64_t r = row0; r < row0 + n; ++r, dst += out_row) {
                const std::uint8_t* src = W.row(rows_from.empty() ? r : rows_from[std::size_t(r)]);
                if (out == W.type) {
                    std::memcpy(dst, src, out_row);
                    continue;
                }
                // A value the target cannot hold (NaN, Inf, beyond f16's 65504 or a block scale's
                // range) would be written as Inf or garbage: refuse it, naming where it is.
                const auto refuse = [&](std::int64_t c) {
                    AQPIM_FAIL("convert: tensor {} row {} column {} is {}, which {} cannot hold", name, r, c,
                               tmp[std::size_t(c)], ggml_type_name(out));
                };
                dequantize(W.type, src, tmp.data(), W.cols);
                for (std::int64_t c = 0; c < W.cols; ++c)
                    if (!std::isfinite(tmp[std::size_t(c)])) refuse(c);
                quantize(out, tmp.data(), dst, W.cols);
                dequantize(out, dst, back.data(), W.cols);
                for (std::int64_t c = 0; c < W.cols; ++c)
                    if (!std::isfinite(back[std::size_t(c)])) refuse(c);
            }
        };
        bytes_ += ggml_row_bytes(out, W.cols) * std::uint64_t(W.rows);
        ++n_tensors_;
        writer_.add_tensor(name, {W.cols, W.rows}, out, std::move(generate));
        matrix_elements_[out] += W.rows * W.cols;
    }

    /// A vector, stored F32 as llama.cpp stores norms and biases.
    void vector(const std::string& name, const std::vector<float>& v, std::int64_t expect,
                const std::vector<std::int64_t>& rows_from = {}) {
        AQPIM_CHECK(std::int64_t(v.size()) == expect, "convert: tensor {} has {} values, expected {}", name, v.size(),
                    expect);
        if (rows_from.empty()) return add(name, {expect}, GgmlType::F32, f32_bytes(v));
        std::vector<float> p(v.size());
        for (std::size_t i = 0; i < p.size(); ++i) p[i] = v[std::size_t(rows_from[i])];
        add(name, {expect}, GgmlType::F32, f32_bytes(p));
    }

    int n_tensors() const { return n_tensors_; }
    std::uint64_t bytes() const { return bytes_; }
    /// The matrix type holding most weights (general.file_type is named after it).
    GgmlType main_type() const {
        GgmlType best = GgmlType::F32;
        std::int64_t most = -1;
        for (const auto& [t, n] : matrix_elements_)
            if (n > most) most = n, best = t;
        return best;
    }

private:
    void add(const std::string& name, std::vector<std::int64_t> ne, GgmlType type, std::vector<std::uint8_t> data) {
        bytes_ += data.size();
        ++n_tensors_;
        writer_.add_tensor(name, ne, type, std::move(data));
    }

    GgufWriter& writer_;
    std::optional<GgmlType> target_;
    int n_tensors_ = 0;
    std::uint64_t bytes_ = 0;
    std::map<GgmlType, std::int64_t> matrix_elements_;
};

/// llama.cpp's rope_freqs.weight for Llama-3.1 scaling: one divisor of each pair's frequency
/// (as convert_hf_to_gguf.py computes it).
std::vector<float> llama3_rope_factors(const ModelConfig& c) {
    const RopeScaling& s = c.rope_scaling;
    const double low_wavelen = s.original_context / s.low_freq_factor;
    const double high_wavelen = s.original_context / s.high_freq_factor;
    std::vector<float> f(std::size_t(c.head_dim / 2));
    for (int i = 0; i < c.head_dim / 2; ++i) {
        const float freq = 1.0f / std::pow(c.rope_theta, float(2 * i) / float(c.head_dim));
        const double wavelen = 2 * std::numbers::pi / freq;
        if (wavelen < high_wavelen) {
            f[std::size_t(i)] = 1.0f;
        } else if (wavelen > low_wavelen) {
            f[std::size_t(i)] = s.factor;
        } else {
            const double smooth = (s.original_context / wavelen - s.low_freq_factor) /
                                  (s.high_freq_factor - s.low_freq_factor);
            f[std::size_t(i)] = float(1.0 / ((1 - smooth) / s.factor + smooth));
        }
    }
    return f;
}

}  // namespace

std::vector<std::int64_t> neox_to_interleaved_rows(int n_head, int head_dim) {
    AQPIM_CHECK(n_head > 0 && head_dim > 0 && head_dim % 2 == 0,
                "neox_to_interleaved_rows: n_head {} and head_dim {} (must be even)", n_head, head_dim);
    const std::int64_t D = head_dim, half = D / 2;
    std::vector<std::int64_t> from(std::size_t(n_head) * std::size_t(D));
    for (std::int64_t h = 0; h < n_head; ++h)
        for (std::int64_t j = 0; j < half; ++j)
            for (std::int64_t t = 0; t < 2; ++t) from[std::size_t(h * D + 2 * j + t)] = h * D + t * half + j;
    return from;
}

bool convert_permutes_qk(const ModelConfig& c) {
    return c.arch == ModelArch::llama && c.rope_pairs == RopePairs::neox;
}

std::optional<GgmlType> parse_convert_type(const std::string& name) {
    if (name == "source") return std::nullopt;
    return ggml_type_named(name, {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0},
                           "convert: type (or source, as stored)");
}

ConvertSummary convert_to_gguf(const LoadedModel& model, const std::string& out_path, const ConvertOptions& options) {
    const ModelWeights& w = model.weights;
    const ModelConfig& c = w.config;
    c.validate();
    AQPIM_CHECK(!options.matrix_type || is_target_type(*options.matrix_type),
                "convert: output type {} is not supported (supported: F32, F16, BF16, Q8_0, or as stored)",
                ggml_type_name(*options.matrix_type));
    // GGUF llama rotates interleaved pairs, GGUF qwen2 rotates halves
    const RopePairs gguf_pairs = c.arch == ModelArch::qwen2 ? RopePairs::neox : RopePairs::interleaved;
    const bool permute = convert_permutes_qk(c);
    AQPIM_CHECK(permute || c.rope_pairs == gguf_pairs,
                "convert: a {} model with {} RoPE pairs cannot be written as GGUF (which uses {} pairs for {})",
                model_arch_name(c.arch), pairs_name(c.rope_pairs), pairs_name(gguf_pairs), model_arch_name(c.arch));
    AQPIM_CHECK(std::int64_t(w.layers.size()) == c.n_layer, "convert: {} layers of weights for n_layer {}",
                w.layers.size(), c.n_layer);
    const std::string arch = model_arch_name(c.arch);
    const std::int64_t E = c.n_embd, F = c.n_ff, V = c.n_vocab, Q = std::int64_t(c.n_head) * c.head_dim,
                       KV = std::int64_t(c.n_kv_head) * c.head_dim;
    const std::vector<std::int64_t> q_rows = permute ? neox_to_interleaved_rows(c.n_head, c.head_dim)
                                                     : std::vector<std::int64_t>{};
    const std::vector<std::int64_t> k_rows = permute ? neox_to_interleaved_rows(c.n_kv_head, c.head_dim)
                                                     : std::vector<std::int64_t>{};

    const int n_vocab_tokens = model.tokenizer ? model.tokenizer->n_vocab() : 0;
    AQPIM_CHECK(!model.tokenizer || n_vocab_tokens == c.n_vocab,
                "convert: the vocabulary has {} tokens but the model has {} rows of embeddings (llama.cpp needs them "
                "equal)", n_vocab_tokens, c.n_vocab);

    // ---- tensors (first: general.file_type is named after the type most matrix weights end up in;
    // the writer keeps tensors apart from the metadata) -----------------------------------------
    GgufWriter g;
    TensorSink t(g, options.matrix_type);
    if (!w.rope_freq_factors.empty())
        t.vector("rope_freqs.weight", w.rope_freq_factors, c.head_dim / 2);
    else if (c.rope_scaling.kind == RopeScaling::Kind::llama3)
        t.vector("rope_freqs.weight", llama3_rope_factors(c), c.head_dim / 2);
    t.matrix("token_embd.weight", w.token_embd, V, E);
    for (int il = 0; il < c.n_layer; ++il) {
        const LayerWeights& l = w.layers[std::size_t(il)];
        const std::string p = fmt::format("blk.{}.", il);
        t.vector(p + "attn_norm.weight", l.attn_norm, E);
        t.matrix(p + "attn_q.weight", l.wq, Q, E, q_rows);
        t.matrix(p + "attn_k.weight", l.wk, KV, E, k_rows);
        t.matrix(p + "attn_v.weight", l.wv, KV, E);
        t.matrix(p + "attn_output.weight", l.wo, E, Q);
        if (c.qkv_bias) {
            t.vector(p + "attn_q.bias", l.bq, Q, q_rows);
            t.vector(p + "attn_k.bias", l.bk, KV, k_rows);
            t.vector(p + "attn_v.bias", l.bv, KV);
        }
        t.vector(p + "ffn_norm.weight", l.ffn_norm, E);
        t.matrix(p + "ffn_gate.weight", l.w_gate, F, E);
        t.matrix(p + "ffn_up.weight", l.w_up, F, E);
        t.matrix(p + "ffn_down.weight", l.w_down, E, F);
    }
    t.vector("output_norm.weight", w.output_norm, E);
    if (!c.tied_output) t.matrix("output.weight", w.output, V, E);

    const std::uint32_t file_type = llama_file_type(t.main_type());

    // ---- metadata, in the order convert_hf_to_gguf.py writes it --------------------------------
    const std::string k = arch + ".";
    g.set_string("general.architecture", arch);
    g.set_string("general.type", "model");
    g.set_string("general.name", options.name.empty() ? c.name : options.name);
    g.set_u32(k + "block_count", std::uint32_t(c.n_layer));
    g.set_u32(k + "context_length", std::uint32_t(c.n_ctx_train));
    g.set_u32(k + "embedding_length", std::uint32_t(c.n_embd));
    g.set_u32(k + "feed_forward_length", std::uint32_t(c.n_ff));
    g.set_u32(k + "attention.head_count", std::uint32_t(c.n_head));
    g.set_u32(k + "attention.head_count_kv", std::uint32_t(c.n_kv_head));
    g.set_f32(k + "rope.freq_base", c.rope_theta);
    g.set_f32(k + "attention.layer_norm_rms_epsilon", c.rms_eps);
    g.set_u32(k + "attention.key_length", std::uint32_t(c.head_dim));
    g.set_u32(k + "attention.value_length", std::uint32_t(c.head_dim));

    g.set_u32("general.file_type", file_type);
    g.set_u32(k + "vocab_size", std::uint32_t(c.n_vocab));
    g.set_u32(k + "rope.dimension_count", std::uint32_t(c.head_dim));
    if (c.rope_scaling.kind == RopeScaling::Kind::linear) {
        g.set_string(k + "rope.scaling.type", "linear");
        g.set_f32(k + "rope.scaling.factor", c.rope_scaling.factor);
    }

    if (model.tokenizer) {
        write_vocab_gguf(g, model.tokenizer->vocab());
    } else {
        g.set_string("tokenizer.ggml.model", "no_vocab");  // llama.cpp's LLAMA_VOCAB_TYPE_NONE
    }
    g.set_u32("general.quantization_version", 2);

    g.write(out_path);

    ConvertSummary s;
    s.arch = arch;
    s.n_tensors = t.n_tensors();
    s.tensor_bytes = t.bytes();
    s.file_type = file_type;
    s.permuted_qk = permute;
    s.n_vocab_tokens = n_vocab_tokens;
    return s;
}

}  // namespace aqpim
