// llama2.c "v0" checkpoints (Karpathy's run.c format) -> ModelWeights, zero copy.
//
// Layout: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len); a
// negative vocab_size means a separate classifier at the end. Then f32 arrays, each layer-major:
//   token_embedding [vocab][dim]
//   rms_att [L][dim], wq [L][dim][dim], wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim]
//   rms_ffn [L][dim], w1 [L][hidden][dim], w2 [L][dim][hidden], w3 [L][hidden][dim]
//   rms_final [dim], freq_cis_real [seq_len][head_size/2], freq_cis_imag [seq_len][head_size/2]
//   wcls [vocab][dim] (only when vocab_size < 0)
// with kv_dim = dim / n_heads * n_kv_heads. llama2.c rotates interleaved pairs (2i, 2i+1) with
// theta 10000 and normalises with eps 1e-5; w1 is the gate, w3 the up and w2 the down projection.
// The file must have exactly the size the header implies.

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>

#include "aqpim/error.h"
#include "aqpim/mapped_file.h"
#include "aqpim/model.h"

namespace aqpim {

namespace {

struct Llama2cHeader {
    std::int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

/// f32 values of every section in file order (checked header, so no overflow in 64 bits).
struct Llama2cLayout {
    std::uint64_t n_floats_shared = 0;  // everything except wcls
    std::uint64_t n_floats_wcls = 0;
};

Llama2cLayout layout_of(const Llama2cHeader& h) {
    const std::uint64_t dim = std::uint64_t(h.dim), hidden = std::uint64_t(h.hidden_dim), L = std::uint64_t(h.n_layers);
    const std::uint64_t vocab = std::uint64_t(h.vocab_size < 0 ? -std::int64_t(h.vocab_size) : h.vocab_size);
    const std::uint64_t kv_dim = dim / std::uint64_t(h.n_heads) * std::uint64_t(h.n_kv_heads);
    const std::uint64_t head_size = dim / std::uint64_t(h.n_heads);
    Llama2cLayout l;
    l.n_floats_shared = vocab * dim + L * (dim + dim * dim + 2 * kv_dim * dim + dim * dim + dim + 3 * hidden * dim) +
                        dim + 2 * std::uint64_t(h.seq_len) * (head_size / 2);
    l.n_floats_wcls = vocab * dim;
    return l;
}

void check_header(const Llama2cHeader& h, const std::string& path) {
    // generous bounds (beyond any llama2.c export) that keep every size below 2^63
    const auto in_range = [&](const char* field, std::int64_t v, std::int64_t hi) {
        AQPIM_CHECK(v >= 1 && v <= hi, "llama2.c checkpoint {}: header field {} = {} is out of range [1, {}]", path,
                    field, v, hi);
    };
    in_range("dim", h.dim, 1 << 16);
    in_range("hidden_dim", h.hidden_dim, 1 << 18);
    in_range("n_layers", h.n_layers, 1024);
    in_range("n_heads", h.n_heads, 1024);
    in_range("n_kv_heads", h.n_kv_heads, 1024);
    in_range("|vocab_size|", h.vocab_size < 0 ? -std::int64_t(h.vocab_size) : h.vocab_size, 1 << 22);
    in_range("seq_len", h.seq_len, 1 << 24);
    AQPIM_CHECK(h.dim % h.n_heads == 0, "llama2.c checkpoint {}: dim {} is not divisible by n_heads {}", path, h.dim,
                h.n_heads);
    AQPIM_CHECK(h.n_heads % h.n_kv_heads == 0,
                "llama2.c checkpoint {}: n_heads {} is not a multiple of n_kv_heads {}", path, h.n_heads,
                h.n_kv_heads);
    AQPIM_CHECK((h.dim / h.n_heads) % 2 == 0, "llama2.c checkpoint {}: head size {} is odd (RoPE rotates pairs)",
                path, h.dim / h.n_heads);
}

}  // namespace

LoadedModel load_llama2c_model(const std::string& path, const std::string& tokenizer_path) {
    auto file = std::make_shared<const MappedFile>(path);
    const std::uint64_t size = file->size();
    AQPIM_CHECK(size >= sizeof(Llama2cHeader), "llama2.c checkpoint {}: {} bytes, too short for the 28-byte header",
                path, size);
    AQPIM_CHECK(std::memcmp(file->data(), "ak42", 4) != 0,
                "llama2.c checkpoint {}: a version 1/2 export (magic 'ak42'); only the legacy v0 format is read",
                path);
    Llama2cHeader h;
    std::memcpy(&h, file->data(), sizeof h);
    check_header(h, path);

    const bool shared = h.vocab_size > 0;
    const Llama2cLayout lay = layout_of(h);
    const std::uint64_t expect = sizeof h + 4 * (lay.n_floats_shared + (shared ? 0 : lay.n_floats_wcls));
    if (size != expect) {
        const std::uint64_t other = sizeof h + 4 * (lay.n_floats_shared + (shared ? lay.n_floats_wcls : 0));
        AQPIM_FAIL("llama2.c checkpoint {}: {} bytes, but the header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, "
                   "n_kv_heads {}, vocab_size {}, seq_len {}) with {} classifier needs {} bytes ({} {}){}",
                   path, size, h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size, h.seq_len,
                   shared ? "a shared" : "a separate", expect, size < expect ? expect - size : size - expect,
                   size < expect ? "bytes missing: truncated?" : "bytes too many",
                   size == other ? fmt::format("; the size fits a {} classifier: is the sign of vocab_size wrong?",
                                               shared ? "separate" : "shared")
                                 : std::string());
    }

    LoadedModel out;
    ModelWeights& w = out.weights;
    ModelConfig& c = w.config;
    c.arch = ModelArch::llama;
    c.name = std::filesystem::path(path).stem().string();
    c.n_embd = h.dim;
    c.n_ff = h.hidden_dim;
    c.n_layer = h.n_layers;
    c.n_head = h.n_heads;
    c.n_kv_head = h.n_kv_heads;
    c.head_dim = h.dim / h.n_heads;
    c.n_vocab = shared ? h.vocab_size : -h.vocab_size;
    c.n_ctx_train = h.seq_len;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.rope_pairs = RopePairs::interleaved;
    c.tied_output = shared;
    c.validate();
    w.format = "llama2c";
    w.storage.push_back(file);

    // Walk the sections in file order; the size check above guarantees they fit.
    const std::uint8_t* p = file->data() + sizeof h;
    const auto take_matrix = [&](std::int64_t rows, std::int64_t cols) {
        WeightMatrix m;
        m.type = GgmlType::F32;
        m.rows = rows;
        m.cols = cols;
        m.data = p;
        p += std::size_t(rows * cols) * 4;
        return m;
    };
    const auto take_vector = [&](std::int64_t n) {
        std::vector<float> v(static_cast<std::size_t>(n));
        std::memcpy(v.data(), p, v.size() * 4);
        p += v.size() * 4;
        return v;
    };
    const std::int64_t E = c.n_embd, F = c.n_ff, KV = std::int64_t(c.n_kv_head) * c.head_dim;
    w.token_embd = take_matrix(c.n_vocab, E);
    w.layers.resize(std::size_t(c.n_layer));
    // each weight kind is stored for all layers before the next kind
    for (auto& l : w.layers) l.attn_norm = take_vector(E);
    for (auto& l : w.layers) l.wq = take_matrix(E, E);
    for (auto& l : w.layers) l.wk = take_matrix(KV, E);
    for (auto& l : w.layers) l.wv = take_matrix(KV, E);
    for (auto& l : w.layers) l.wo = take_matrix(E, E);
    for (auto& l : w.layers) l.ffn_norm = take_vector(E);
    for (auto& l : w.layers) l.w_gate = take_matrix(F, E);  // w1
    for (auto& l : w.layers) l.w_down = take_matrix(E, F);  // w2
    for (auto& l : w.layers) l.w_up = take_matrix(F, E);    // w3
    w.output_norm = take_vector(E);
    p += 2 * std::size_t(h.seq_len) * std::size_t(c.head_dim / 2) * 4;  // freq_cis_real/imag: recomputed
    w.output = shared ? w.token_embd : take_matrix(c.n_vocab, E);
    AQPIM_ASSERT(p == file->data() + size);

    if (!tokenizer_path.empty()) out.tokenizer = Tokenizer::create(vocab_from_llama2c(tokenizer_path, c.n_vocab));
    return out;
}

}  // namespace aqpim
