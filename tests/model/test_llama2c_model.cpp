// llama2.c checkpoints: stories260K loads with the right shape and its weights are the bytes of
// the file (and what llama.cpp's own converter made of them); every section of a generated
// checkpoint lands where run.c reads it; hostile headers and wrong sizes are errors, never crashes.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/model.h"
#include "support/cli.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;

const std::string kDir = test::shared_dir() + "/models/stories260K";
const std::string kBin = kDir + "/stories260K.bin";
const std::string kTok = kDir + "/tok512.bin";

std::string temp_path(const std::string& name) {
    return (fs::temp_directory_path() / ("aqpim_test_llama2c_" + name)).string();
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

float float_at(const std::string& bytes, std::size_t float_index) {
    float v;
    std::memcpy(&v, bytes.data() + 28 + 4 * float_index, 4);
    return v;
}

float matrix_at(const WeightMatrix& W, std::int64_t r, std::int64_t c) {
    EXPECT_EQ(W.type, GgmlType::F32);
    float v;
    std::memcpy(&v, W.row(r) + 4 * c, 4);
    return v;
}

TEST(Llama2cModel, LoadsStories260K) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const LoadedModel m = load_llama2c_model(kBin, kTok);
    const ModelConfig& c = m.weights.config;
    EXPECT_EQ(m.weights.format, "llama2c");
    EXPECT_EQ(c.arch, ModelArch::llama);
    EXPECT_EQ(c.name, "stories260K");
    EXPECT_EQ(c.n_embd, 64);
    EXPECT_EQ(c.n_ff, 172);
    EXPECT_EQ(c.n_layer, 5);
    EXPECT_EQ(c.n_head, 8);
    EXPECT_EQ(c.n_kv_head, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_EQ(c.n_ctx_train, 512);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
    EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
    EXPECT_EQ(c.rope_pairs, RopePairs::interleaved);
    EXPECT_TRUE(c.tied_output);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_EQ(m.weights.output.data, m.weights.token_embd.data);
    ASSERT_TRUE(m.tokenizer);
    EXPECT_EQ(m.tokenizer->n_vocab(), 512);

    // Values at offsets computed here from the run.c layout, read from the raw file.
    const std::string raw = read_bytes(kBin);
    const std::size_t V = 512, E = 64, F = 172, L = 5, KV = 32;
    std::size_t off = 0;
    const std::size_t embd = off;        off += V * E;
    const std::size_t rms_att = off;     off += L * E;
    const std::size_t wq = off;          off += L * E * E;
    const std::size_t wk = off;          off += L * KV * E;
    const std::size_t wv = off;          off += L * KV * E;
    const std::size_t wo = off;          off += L * E * E;
    const std::size_t rms_ffn = off;     off += L * E;
    const std::size_t w1 = off;          off += L * F * E;
    const std::size_t w2 = off;          off += L * E * F;
    const std::size_t w3 = off;          off += L * F * E;
    const std::size_t rms_final = off;
    const auto& W = m.weights;
    EXPECT_EQ(matrix_at(W.token_embd, 300, 17), float_at(raw, embd + 300 * E + 17));
    EXPECT_EQ(W.layers[3].attn_norm[5], float_at(raw, rms_att + 3 * E + 5));
    EXPECT_EQ(matrix_at(W.layers[2].wq, 63, 1), float_at(raw, wq + 2 * E * E + 63 * E + 1));
    EXPECT_EQ(matrix_at(W.layers[4].wk, 31, 63), float_at(raw, wk + 4 * KV * E + 31 * E + 63));
    EXPECT_EQ(matrix_at(W.layers[1].wv, 7, 9), float_at(raw, wv + 1 * KV * E + 7 * E + 9));
    EXPECT_EQ(matrix_at(W.layers[0].wo, 10, 20), float_at(raw, wo + 10 * E + 20));
    EXPECT_EQ(W.layers[4].ffn_norm[63], float_at(raw, rms_ffn + 4 * E + 63));
    EXPECT_EQ(matrix_at(W.layers[1].w_gate, 171, 3), float_at(raw, w1 + 1 * F * E + 171 * E + 3));
    EXPECT_EQ(matrix_at(W.layers[3].w_down, 2, 170), float_at(raw, w2 + 3 * E * F + 2 * F + 170));
    EXPECT_EQ(matrix_at(W.layers[2].w_up, 100, 50), float_at(raw, w3 + 2 * F * E + 100 * E + 50));
    EXPECT_EQ(W.output_norm[0], float_at(raw, rms_final));
    EXPECT_EQ(W.output_norm[63], float_at(raw, rms_final + 63));
}

// llama.cpp's convert-llama2c-to-ggml made stories260K.gguf from the same checkpoint: every
// tensor must hold the same values as the one we map it to (w1 = gate, w3 = up, w2 = down).
TEST(Llama2cModel, WeightsEqualLlamaCppConversion) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    const LoadedModel m = load_llama2c_model(kBin, "");
    EXPECT_FALSE(m.tokenizer);
    GgufFile g(kDir + "/stories260K.gguf");
    const auto same = [&](const std::string& name, const void* data, std::size_t n_bytes) {
        const GgufTensorInfo& t = g.tensor(name);
        ASSERT_EQ(t.type, GgmlType::F32) << name;
        ASSERT_EQ(t.n_bytes, n_bytes) << name;
        EXPECT_EQ(std::memcmp(g.tensor_data(t), data, n_bytes), 0) << name;
    };
    const ModelWeights& w = m.weights;
    same("token_embd.weight", w.token_embd.data, w.token_embd.n_bytes());
    same("output.weight", w.output.data, w.output.n_bytes());
    same("output_norm.weight", w.output_norm.data(), w.output_norm.size() * 4);
    for (int il = 0; il < 5; ++il) {
        const LayerWeights& l = w.layers[std::size_t(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        same(p + "attn_norm.weight", l.attn_norm.data(), l.attn_norm.size() * 4);
        same(p + "ffn_norm.weight", l.ffn_norm.data(), l.ffn_norm.size() * 4);
        same(p + "attn_q.weight", l.wq.data, l.wq.n_bytes());
        same(p + "attn_k.weight", l.wk.data, l.wk.n_bytes());
        same(p + "attn_v.weight", l.wv.data, l.wv.n_bytes());
        same(p + "attn_output.weight", l.wo.data, l.wo.n_bytes());
        same(p + "ffn_gate.weight", l.w_gate.data, l.w_gate.n_bytes());
        same(p + "ffn_up.weight", l.w_up.data, l.w_up.n_bytes());
        same(p + "ffn_down.weight", l.w_down.data, l.w_down.n_bytes());
    }
}

// A generated checkpoint whose float i holds the value i: each weight's first and last element
// tell exactly which section of the file it was mapped to.
struct Header {
    std::int32_t dim = 8, hidden = 12, n_layers = 2, n_heads = 2, n_kv_heads = 1, vocab = 10, seq_len = 4;
};

std::size_t n_floats(const Header& h, bool with_wcls) {
    const std::size_t E = std::size_t(h.dim), F = std::size_t(h.hidden), L = std::size_t(h.n_layers);
    const std::size_t V = std::size_t(std::abs(std::int64_t(h.vocab))), KV = E / std::size_t(h.n_heads) * std::size_t(h.n_kv_heads);
    const std::size_t hs = E / std::size_t(h.n_heads);
    return V * E + L * (2 * E + 2 * E * E + 2 * KV * E + 3 * F * E) + E + 2 * std::size_t(h.seq_len) * hs / 2 +
           (with_wcls ? V * E : 0);
}

std::string checkpoint(const Header& h, std::size_t floats) {
    std::string b(28 + 4 * floats, '\0');
    std::memcpy(b.data(), &h, 28);
    for (std::size_t i = 0; i < floats; ++i) {
        const float v = float(i);
        std::memcpy(b.data() + 28 + 4 * i, &v, 4);
    }
    return b;
}

TEST(Llama2cModel, EverySectionOfAGeneratedCheckpoint) {
    for (const bool shared : {true, false}) {
        Header h;
        h.vocab = shared ? 10 : -10;
        const std::string path = temp_path(shared ? "shared.bin" : "unshared.bin");
        write_bytes(path, checkpoint(h, n_floats(h, !shared)));
        const LoadedModel m = load_llama2c_model(path, "");
        const ModelWeights& w = m.weights;
        EXPECT_EQ(w.config.tied_output, shared);
        EXPECT_EQ(w.config.n_vocab, 10);
        EXPECT_EQ(w.config.head_dim, 4);
        EXPECT_EQ(w.config.n_ctx_train, 4);
        // E = 8, F = 12, KV = 4, V = 10, L = 2; sections in run.c order
        const auto first = [](const WeightMatrix& W) { return matrix_at(W, 0, 0); };
        const auto last = [](const WeightMatrix& W) { return matrix_at(W, W.rows - 1, W.cols - 1); };
        EXPECT_EQ(first(w.token_embd), 0);
        EXPECT_EQ(last(w.token_embd), 79);
        EXPECT_EQ(w.layers[0].attn_norm[0], 80);
        EXPECT_EQ(w.layers[1].attn_norm[7], 95);
        EXPECT_EQ(first(w.layers[0].wq), 96);
        EXPECT_EQ(first(w.layers[1].wq), 160);
        EXPECT_EQ(last(w.layers[1].wq), 223);
        EXPECT_EQ(first(w.layers[0].wk), 224);
        EXPECT_EQ(last(w.layers[1].wk), 287);
        EXPECT_EQ(first(w.layers[0].wv), 288);
        EXPECT_EQ(first(w.layers[0].wo), 352);
        EXPECT_EQ(last(w.layers[1].wo), 479);
        EXPECT_EQ(w.layers[0].ffn_norm[0], 480);
        EXPECT_EQ(first(w.layers[0].w_gate), 496);   // w1 [L][F][E]
        EXPECT_EQ(first(w.layers[1].w_gate), 592);
        EXPECT_EQ(first(w.layers[0].w_down), 688);   // w2 [L][E][F]
        EXPECT_EQ(matrix_at(w.layers[0].w_down, 1, 0), 700);
        EXPECT_EQ(first(w.layers[0].w_up), 880);     // w3 [L][F][E]
        EXPECT_EQ(last(w.layers[1].w_up), 1071);
        EXPECT_EQ(w.output_norm[0], 1072);
        // freq_cis: 2 * 4 * 2 floats skipped (1080..1095)
        if (shared) {
            EXPECT_EQ(w.output.data, w.token_embd.data);
        } else {
            EXPECT_EQ(first(w.output), 1096);
            EXPECT_EQ(last(w.output), 1175);
        }
    }
}

TEST(Llama2cModel, HostileHeadersAreErrors) {
    const std::string path = temp_path("hostile.bin");
    const auto expect_error = [&](Header h, const char* what) {
        const bool sane = h.dim > 0 && h.dim <= 64 && h.hidden > 0 && h.hidden <= 64 && h.n_layers > 0 &&
                          h.n_layers <= 4 && h.n_heads > 0 && h.n_kv_heads > 0 && h.dim % h.n_heads == 0 &&
                          h.vocab != 0 && std::abs(std::int64_t(h.vocab)) <= 64 && h.seq_len > 0 && h.seq_len <= 64;
        // a sane header gets its exact size (so the header check itself must refuse it); an absurd
        // one gets a small file
        write_bytes(path, checkpoint(h, sane ? n_floats(h, h.vocab < 0) : 64));
        try {
            load_llama2c_model(path, "");
            ADD_FAILURE() << "no error for " << what;
        } catch (const Error& e) {
            SCOPED_TRACE(e.what());
        }
    };
    const auto with = [](auto edit) {
        Header h;
        edit(h);
        return h;
    };
    expect_error(with([](Header& h) { h.dim = 0; }), "dim 0");
    expect_error(with([](Header& h) { h.dim = -8; }), "negative dim");
    expect_error(with([](Header& h) { h.dim = 1 << 30; }), "absurd dim");
    expect_error(with([](Header& h) { h.hidden = 0; }), "hidden 0");
    expect_error(with([](Header& h) { h.hidden = -1; }), "negative hidden");
    expect_error(with([](Header& h) { h.hidden = 0x7fffffff; }), "absurd hidden");
    expect_error(with([](Header& h) { h.n_layers = 0; }), "no layers");
    expect_error(with([](Header& h) { h.n_layers = 1 << 20; }), "absurd layers");
    expect_error(with([](Header& h) { h.n_heads = 0; }), "no heads");
    expect_error(with([](Header& h) { h.n_heads = 3; }), "dim % heads");
    expect_error(with([](Header& h) { h.n_heads = 8; h.n_kv_heads = 8; }), "odd head size");
    expect_error(with([](Header& h) { h.n_kv_heads = 0; }), "no kv heads");
    expect_error(with([](Header& h) { h.n_kv_heads = 4; }), "kv > heads");
    expect_error(with([](Header& h) { h.n_heads = 4; h.n_kv_heads = 3; }), "kv does not divide heads");
    expect_error(with([](Header& h) { h.vocab = 0; }), "vocab 0");
    expect_error(with([](Header& h) { h.vocab = std::numeric_limits<std::int32_t>::min(); }), "vocab INT_MIN");
    expect_error(with([](Header& h) { h.vocab = 1 << 30; }), "absurd vocab");
    expect_error(with([](Header& h) { h.seq_len = 0; }), "seq_len 0");
    expect_error(with([](Header& h) { h.seq_len = -4; }), "negative seq_len");

    // too short for a header, and a v1/v2 export
    for (std::size_t n : {0, 1, 4, 27}) {
        write_bytes(path, std::string(n, '\x08'));
        EXPECT_THROW(load_llama2c_model(path, ""), Error) << n << " bytes";
    }
    std::string v1 = checkpoint(Header{}, 64);
    std::memcpy(v1.data(), "ak42", 4);
    write_bytes(path, v1);
    EXPECT_THROW(load_llama2c_model(path, ""), Error);
    EXPECT_THROW(load_llama2c_model(temp_path("does_not_exist.bin"), ""), Error);
}

TEST(Llama2cModel, WrongFileSizesAreErrors) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    const std::string raw = read_bytes(kBin);
    const std::string path = temp_path("cut.bin");
    // truncated at many offsets: inside the header, inside each section, one float short
    std::vector<std::size_t> cuts = {0, 3, 27, 28, 29, 100, 4096, raw.size() / 2, raw.size() - 4, raw.size() - 1};
    for (std::size_t cut = 28; cut < raw.size(); cut += 65537) cuts.push_back(cut);
    for (std::size_t cut : cuts) {
        write_bytes(path, raw.substr(0, cut));
        EXPECT_THROW(load_llama2c_model(path, ""), Error) << "cut at " << cut;
    }
    // trailing bytes
    write_bytes(path, raw + std::string(4, '\0'));
    EXPECT_THROW(load_llama2c_model(path, ""), Error);
    // an unshared header on a shared file: the message names the mismatch
    std::string flipped = raw;
    std::int32_t vocab;
    std::memcpy(&vocab, flipped.data() + 20, 4);
    vocab = -vocab;
    std::memcpy(flipped.data() + 20, &vocab, 4);
    write_bytes(path, flipped);
    try {
        load_llama2c_model(path, "");
        ADD_FAILURE() << "no error for a flipped vocab_size sign";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("bytes missing"), std::string::npos) << msg;
        EXPECT_NE(msg.find("separate classifier"), std::string::npos) << msg;
    }
    // a shared header on an unshared file: the size fits the other variant
    Header h;
    h.vocab = 10;
    write_bytes(path, checkpoint(h, n_floats(h, true)));
    try {
        load_llama2c_model(path, "");
        ADD_FAILURE() << "no error for a file with an unexpected classifier";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("sign of vocab_size"), std::string::npos) << e.what();
    }
}

TEST(Llama2cModel, MissingTokenizerIsAnError) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    EXPECT_THROW(load_llama2c_model(kBin, temp_path("no_tokenizer.bin")), Error);
}

}  // namespace
}  // namespace aqpim
