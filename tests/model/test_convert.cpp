// `convert`: safetensors and llama2.c checkpoints -> GGUF. The converted austen-13m and stories260K
// equal, tensor for tensor and byte for byte, what llama.cpp's own converters made of them; a round
// trip through load_gguf_model gives the original weights (Q/K rows permuted from NeoX to
// interleaved order for HF Llama checkpoints), and the permuted model with interleaved RoPE
// computes the same attention scores and logits as the original with NeoX RoPE.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <tuple>

#include "aqpim/convert.h"
#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/half.h"
#include "aqpim/model.h"
#include "aqpim/transformer.h"
#include "support/cli.h"
#include "support/random.h"
#include "support/tiny_model.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;

const std::string kModels = test::shared_dir() + "/models";
const std::string kTiny = kModels + "/tinystories-656k";
const std::string kAusten = kModels + "/austen-13m";
const std::string kStories = kModels + "/stories260K";

std::string temp_path(const std::string& name) {
    return (fs::temp_directory_path() / ("aqpim_test_convert_" + name)).string();
}

/// Source row of output row r under llama.cpp's LlamaModel.permute, written as numpy does it:
/// w.reshape(n_head, 2, D/2, cols).swapaxes(1, 2).reshape(rows, cols). Output index (h, j, t) of
/// the swapped array [n_head][D/2][2] reads input (h, t, j) of [n_head][2][D/2].
std::int64_t permuted_source_row(std::int64_t r, int head_dim) {
    const std::int64_t D = head_dim, h = r / D, j = (r % D) / 2, t = r % 2;
    return h * D + t * (D / 2) + j;
}

bool rows_equal(const WeightMatrix& a, std::int64_t ra, const WeightMatrix& b, std::int64_t rb) {
    return a.row_bytes() == b.row_bytes() && std::memcmp(a.row(ra), b.row(rb), a.row_bytes()) == 0;
}

/// Every row of `got` equals the original's row (permuted when `head_dim` > 0).
void expect_matrix(const WeightMatrix& got, const WeightMatrix& want, int head_dim, const std::string& what) {
    ASSERT_EQ(got.type, want.type) << what;
    ASSERT_EQ(got.rows, want.rows) << what;
    ASSERT_EQ(got.cols, want.cols) << what;
    for (std::int64_t r = 0; r < got.rows; ++r)
        ASSERT_TRUE(rows_equal(got, r, want, head_dim > 0 ? permuted_source_row(r, head_dim) : r))
            << what << " row " << r;
}

// ---- the permutation itself --------------------------------------------------------------------

TEST(Convert, NeoxToInterleavedRows) {
    // one head of 8: NeoX pairs (0,4) (1,5) (2,6) (3,7) become adjacent
    EXPECT_EQ(neox_to_interleaved_rows(1, 8), (std::vector<std::int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
    EXPECT_EQ(neox_to_interleaved_rows(2, 4), (std::vector<std::int64_t>{0, 2, 1, 3, 4, 6, 5, 7}));
    const auto p = neox_to_interleaved_rows(4, 128);
    for (std::int64_t r = 0; r < 512; ++r) ASSERT_EQ(p[std::size_t(r)], permuted_source_row(r, 128));
    EXPECT_THROW(neox_to_interleaved_rows(2, 7), Error);
}

// ---- against llama.cpp's own converters ---------------------------------------------------------

/// Every tensor of `ref` (made by llama.cpp) is in `got` with the same type, shape and bytes,
/// except those listed in `absent` (and `got` has nothing else).
void expect_same_tensors(const GgufFile& got, const GgufFile& ref, const std::vector<std::string>& absent = {}) {
    std::size_t n_ref = 0;
    for (const GgufTensorInfo& t : ref.tensors()) {
        if (std::find(absent.begin(), absent.end(), t.name) != absent.end()) {
            EXPECT_EQ(got.find_tensor(t.name), nullptr) << t.name;
            continue;
        }
        ++n_ref;
        const GgufTensorInfo* g = got.find_tensor(t.name);
        ASSERT_NE(g, nullptr) << t.name;
        EXPECT_EQ(g->type, t.type) << t.name;
        EXPECT_EQ(g->ne, t.ne) << t.name;
        ASSERT_EQ(g->n_bytes, t.n_bytes) << t.name;
        EXPECT_EQ(std::memcmp(got.tensor_data(*g), ref.tensor_data(t), t.n_bytes), 0) << t.name << " bytes differ";
    }
    EXPECT_EQ(got.tensors().size(), n_ref);
}

TEST(Convert, Austen13mEqualsLlamaCppConversion) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    // llama.cpp's convert_hf_to_gguf.py --outtype f16 made austen-13m-f16.gguf from this checkpoint,
    // permuting Q and K: byte equality checks the permutation on real GQA shapes (head_dim 128).
    const std::string out = temp_path("austen.gguf");
    const ConvertSummary s = convert_to_gguf(load_safetensors_model(kAusten), out);
    EXPECT_TRUE(s.permuted_qk);
    EXPECT_EQ(s.arch, "llama");
    EXPECT_EQ(s.file_type, 1u);  // MOSTLY_F16
    EXPECT_EQ(s.n_tensors, 39);
    EXPECT_EQ(s.n_vocab_tokens, 4096);
    const GgufFile got(out), ref(kAusten + "/austen-13m-f16.gguf");
    EXPECT_EQ(got.version(), 3u);
    expect_same_tensors(got, ref);
    for (const char* key : {"llama.block_count", "llama.context_length", "llama.embedding_length",
                            "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
                            "llama.attention.key_length", "llama.attention.value_length", "general.file_type",
                            "llama.vocab_size", "llama.rope.dimension_count", "tokenizer.ggml.bos_token_id",
                            "tokenizer.ggml.eos_token_id"})
        EXPECT_EQ(got.get_int(key), ref.get_int(key)) << key;
    for (const char* key : {"llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"})
        EXPECT_EQ(got.get_float(key), ref.get_float(key)) << key;
    EXPECT_EQ(got.get_string("general.architecture"), "llama");
    EXPECT_EQ(got.get_string("tokenizer.ggml.model"), ref.get_string("tokenizer.ggml.model"));
    EXPECT_EQ(got.get_string_array("tokenizer.ggml.tokens"), ref.get_string_array("tokenizer.ggml.tokens"));
    fs::remove(out);
}

TEST(Convert, Austen13mVocabularyEqualsLlamaCppConversion) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    // Scores and token types as llama.cpp's converter writes them: it marks the special tokens of
    // tokenizer_config.json's added_tokens_decoder as CONTROL with score -1000 (the vocabulary
    // reader's job, checked here on the converted file).
    const std::string out = temp_path("austen_vocab.gguf");
    convert_to_gguf(load_safetensors_model(kAusten), out);
    const GgufFile got(out), ref(kAusten + "/austen-13m-f16.gguf");
    EXPECT_EQ(got.get_float_array("tokenizer.ggml.scores"), ref.get_float_array("tokenizer.ggml.scores"));
    EXPECT_EQ(got.get_int_array("tokenizer.ggml.token_type"), ref.get_int_array("tokenizer.ggml.token_type"));
    for (const char* key : {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"})
        EXPECT_EQ(got.get_bool(key), ref.get_bool(key)) << key;
    fs::remove(out);
}

TEST(Convert, Llama2cEqualsLlamaCppConversion) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    // llama.cpp's convert-llama2c-to-ggml made stories260K.gguf (it also writes output.weight, a
    // copy of the shared embedding; we leave it tied as llama.cpp's HF converter does).
    const std::string out = temp_path("stories.gguf");
    const LoadedModel m = load_llama2c_model(kStories + "/stories260K.bin", kStories + "/tok512.bin");
    const ConvertSummary s = convert_to_gguf(m, out);
    EXPECT_FALSE(s.permuted_qk);
    EXPECT_EQ(s.file_type, 0u);  // ALL_F32
    const GgufFile got(out), ref(kStories + "/stories260K.gguf");
    expect_same_tensors(got, ref, {"output.weight"});
    EXPECT_EQ(got.get_int("llama.context_length"), 512);  // the training context (llama.cpp wrote 128)
    EXPECT_EQ(got.get_int("llama.rope.dimension_count"), 8);
    EXPECT_EQ(got.get_string_array("tokenizer.ggml.tokens"), ref.get_string_array("tokenizer.ggml.tokens"));

    // and back: the GGUF loader gives the llama2.c weights
    const LoadedModel back = load_gguf_model(out);
    EXPECT_TRUE(back.weights.config.tied_output);
    EXPECT_EQ(back.weights.config.n_ctx_train, 512);
    EXPECT_EQ(back.weights.config.rope_pairs, RopePairs::interleaved);
    for (int il = 0; il < 5; ++il) {
        const LayerWeights &a = back.weights.layers[std::size_t(il)], &b = m.weights.layers[std::size_t(il)];
        expect_matrix(a.wq, b.wq, 0, "wq");
        expect_matrix(a.wk, b.wk, 0, "wk");
        expect_matrix(a.w_gate, b.w_gate, 0, "w_gate");
        expect_matrix(a.w_up, b.w_up, 0, "w_up");
        expect_matrix(a.w_down, b.w_down, 0, "w_down");
        EXPECT_EQ(a.attn_norm, b.attn_norm);
    }
    fs::remove(out);
}

// ---- round trips -------------------------------------------------------------------------------

TEST(Convert, TinyStoriesRoundTrip) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k");
    const std::string out = temp_path("tiny.gguf");
    const LoadedModel src = load_safetensors_model(kTiny);
    const ConvertSummary s = convert_to_gguf(src, out);
    EXPECT_TRUE(s.permuted_qk);
    EXPECT_EQ(s.n_tensors, 1 + 2 * 9 + 1);  // tied: no output.weight
    {
        const GgufFile g(out);
        EXPECT_EQ(g.get_string("general.name"), "tinystories-656k");
        EXPECT_EQ(g.get_int("llama.context_length"), 512);
        EXPECT_EQ(g.get_int("llama.embedding_length"), 128);
        EXPECT_EQ(g.get_int("llama.feed_forward_length"), 384);
        EXPECT_EQ(g.get_int("llama.block_count"), 2);
        EXPECT_EQ(g.get_int("llama.attention.head_count"), 8);
        EXPECT_EQ(g.get_int("llama.attention.head_count_kv"), 4);
        EXPECT_EQ(g.get_int("llama.rope.dimension_count"), 16);
        EXPECT_FLOAT_EQ(float(g.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-6f);
        EXPECT_FLOAT_EQ(float(g.get_float("llama.rope.freq_base")), 10000.0f);
        EXPECT_EQ(g.get_int("general.file_type"), 0);
        EXPECT_EQ(g.find_tensor("output.weight"), nullptr);
        EXPECT_EQ(g.tensor("blk.1.attn_norm.weight").type, GgmlType::F32);
    }
    const LoadedModel back = load_gguf_model(out);
    const ModelConfig &a = back.weights.config, &b = src.weights.config;
    EXPECT_EQ(a.arch, ModelArch::llama);
    EXPECT_EQ(a.rope_pairs, RopePairs::interleaved);
    EXPECT_EQ(a.n_embd, b.n_embd);
    EXPECT_EQ(a.n_ff, b.n_ff);
    EXPECT_EQ(a.n_layer, b.n_layer);
    EXPECT_EQ(a.n_head, b.n_head);
    EXPECT_EQ(a.n_kv_head, b.n_kv_head);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.n_vocab, b.n_vocab);
    EXPECT_EQ(a.n_ctx_train, b.n_ctx_train);
    EXPECT_EQ(a.rms_eps, b.rms_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_TRUE(a.tied_output);
    const ModelWeights &x = back.weights, &y = src.weights;
    expect_matrix(x.token_embd, y.token_embd, 0, "token_embd");
    expect_matrix(x.output, y.token_embd, 0, "output");
    EXPECT_EQ(x.output_norm, y.output_norm);
    for (int il = 0; il < 2; ++il) {
        const LayerWeights &p = x.layers[std::size_t(il)], &q = y.layers[std::size_t(il)];
        expect_matrix(p.wq, q.wq, 16, "wq");  // permuted
        expect_matrix(p.wk, q.wk, 16, "wk");  // permuted
        expect_matrix(p.wv, q.wv, 0, "wv");
        expect_matrix(p.wo, q.wo, 0, "wo");
        expect_matrix(p.w_gate, q.w_gate, 0, "w_gate");
        expect_matrix(p.w_up, q.w_up, 0, "w_up");
        expect_matrix(p.w_down, q.w_down, 0, "w_down");
        EXPECT_EQ(p.attn_norm, q.attn_norm);
        EXPECT_EQ(p.ffn_norm, q.ffn_norm);
    }
    ASSERT_TRUE(back.tokenizer && src.tokenizer);
    EXPECT_EQ(back.tokenizer->vocab().tokens, src.tokenizer->vocab().tokens);
    EXPECT_EQ(back.tokenizer->bos(), src.tokenizer->bos());
    EXPECT_EQ(back.tokenizer->eos(), src.tokenizer->eos());
    fs::remove(out);
}

// RoPE of one head at position pos: NeoX pairs (i, i + D/2) or interleaved pairs (2i, 2i + 1), both
// with frequency theta^(-2i/D) for pair i.
void rope(std::vector<double>& x, std::size_t off, int D, int pos, double theta, bool neox) {
    for (int i = 0; i < D / 2; ++i) {
        const double a = pos * std::pow(theta, -2.0 * i / D), c = std::cos(a), s = std::sin(a);
        const std::size_t i0 = off + std::size_t(neox ? i : 2 * i), i1 = off + std::size_t(neox ? i + D / 2 : 2 * i + 1);
        const double x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x1 * c + x0 * s;
    }
}

std::vector<double> project(const WeightMatrix& W, const std::vector<float>& h) {
    std::vector<double> y(std::size_t(W.rows));
    for (std::int64_t r = 0; r < W.rows; ++r) {
        const float* w = reinterpret_cast<const float*>(W.row(r));
        double s = 0;
        for (std::int64_t c = 0; c < W.cols; ++c) s += double(w[c]) * h[std::size_t(c)];
        y[std::size_t(r)] = s;
    }
    return y;
}

TEST(Convert, PermutedQkWithInterleavedRopeGiveTheSameScores) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k");
    const std::string out = temp_path("tiny_scores.gguf");
    const LoadedModel src = load_safetensors_model(kTiny);
    convert_to_gguf(src, out);
    const LoadedModel dst = load_gguf_model(out);
    const ModelConfig& c = src.weights.config;
    const int D = c.head_dim, group = c.n_head / c.n_kv_head;
    for (int il = 0; il < c.n_layer; ++il) {
        const LayerWeights &a = src.weights.layers[std::size_t(il)], &b = dst.weights.layers[std::size_t(il)];
        const std::vector<float> hq = test::gaussian(std::size_t(c.n_embd), 11 + std::uint64_t(il));
        const std::vector<float> hk = test::gaussian(std::size_t(c.n_embd), 21 + std::uint64_t(il));
        for (const auto& [pq, pk] : {std::pair{0, 0}, std::pair{7, 3}, std::pair{300, 299}, std::pair{511, 0}}) {
            std::vector<double> qa = project(a.wq, hq), ka = project(a.wk, hk);
            std::vector<double> qb = project(b.wq, hq), kb = project(b.wk, hk);
            for (int ih = 0; ih < c.n_head; ++ih) {
                rope(qa, std::size_t(ih * D), D, pq, c.rope_theta, true);
                rope(qb, std::size_t(ih * D), D, pq, c.rope_theta, false);
            }
            for (int ih = 0; ih < c.n_kv_head; ++ih) {
                rope(ka, std::size_t(ih * D), D, pk, c.rope_theta, true);
                rope(kb, std::size_t(ih * D), D, pk, c.rope_theta, false);
            }
            for (int ih = 0; ih < c.n_head; ++ih) {
                double sa = 0, sb = 0;
                for (int d = 0; d < D; ++d) {
                    sa += qa[std::size_t(ih * D + d)] * ka[std::size_t(ih / group * D + d)];
                    sb += qb[std::size_t(ih * D + d)] * kb[std::size_t(ih / group * D + d)];
                }
                ASSERT_NEAR(sa, sb, 1e-9 * (1 + std::fabs(sa))) << "layer " << il << " head " << ih << " pos " << pq;
            }
        }
    }
    fs::remove(out);
}

TEST(Convert, LogitsOfConvertedModelEqualOriginal) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k");
    // the forward pass: NeoX RoPE on the HF layout == interleaved RoPE on the permuted GGUF
    const std::string out = temp_path("tiny_logits.gguf");
    const LoadedModel src = load_safetensors_model(kTiny);
    convert_to_gguf(src, out);
    const LoadedModel dst = load_gguf_model(out);
    const std::vector<std::int32_t> ids = {1, 45, 300, 12, 999, 2047, 7, 7, 1500, 3, 64, 128};
    std::vector<std::vector<float>> logits;
    for (const LoadedModel* m : {&src, &dst}) {
        Transformer t(m->weights);
        auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f32);
        cache->add_sequence(0);
        const BatchSequence s{0, ids, true};
        logits.emplace_back();
        t.forward({&s, 1}, *cache, logits.back());
    }
    ASSERT_EQ(logits[0].size(), ids.size() * 2048);
    ASSERT_EQ(logits[1].size(), logits[0].size());
    for (std::size_t i = 0; i < logits[0].size(); ++i)
        ASSERT_NEAR(logits[0][i], logits[1][i], 1e-4f * (1 + std::fabs(logits[0][i]))) << "at " << i;
    fs::remove(out);
}

// ---- output types ------------------------------------------------------------------------------

TEST(Convert, MatrixTypes) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k");
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    const LoadedModel src = load_safetensors_model(kTiny);
    const LayerWeights& l = src.weights.layers[1];
    const std::string out = temp_path("types.gguf");
    for (const char* name : {"f16", "bf16"}) {
        ConvertOptions o;
        o.matrix_type = parse_convert_type(name);
        const ConvertSummary s = convert_to_gguf(src, out, o);
        EXPECT_EQ(s.file_type, std::string(name) == "f16" ? 1u : 32u);
        const GgufFile g(out);
        EXPECT_EQ(g.tensor("blk.1.attn_norm.weight").type, GgmlType::F32);
        for (const auto& [tname, W, permuted] :
             {std::tuple{"blk.1.attn_q.weight", &l.wq, true}, std::tuple{"blk.1.attn_k.weight", &l.wk, true},
              std::tuple{"blk.1.ffn_down.weight", &l.w_down, false}, std::tuple{"token_embd.weight", &src.weights.token_embd, false}}) {
            const GgufTensorInfo& t = g.tensor(tname);
            ASSERT_EQ(t.type, *o.matrix_type) << tname;
            ASSERT_EQ(t.ne, (std::vector<std::int64_t>{W->cols, W->rows})) << tname;
            const auto* got = reinterpret_cast<const std::uint16_t*>(g.tensor_data(t));
            for (std::int64_t r = 0; r < W->rows; ++r) {
                const float* want = reinterpret_cast<const float*>(W->row(permuted ? permuted_source_row(r, 16) : r));
                for (std::int64_t c = 0; c < W->cols; ++c) {
                    const std::uint16_t h = std::string(name) == "f16" ? f32_to_fp16_scalar(want[c])
                                                                        : f32_to_bf16_scalar(want[c]);
                    ASSERT_EQ(got[r * W->cols + c], h) << tname << " " << r << "," << c;
                }
            }
        }
    }
    // q8_0 loads back within the format's error: half a step of each 32-value block's scale, plus the
    // rounding of that scale to f16
    ConvertOptions o;
    o.matrix_type = GgmlType::Q8_0;
    EXPECT_EQ(convert_to_gguf(src, out, o).file_type, 7u);
    const LoadedModel q = load_gguf_model(out);
    const WeightMatrix& W = q.weights.layers[1].w_up;
    ASSERT_EQ(W.type, GgmlType::Q8_0);
    std::vector<float> row(std::size_t(W.cols));
    for (std::int64_t r = 0; r < W.rows; r += 37) {
        dequantize_row(W, r, row.data());
        const float* want = reinterpret_cast<const float*>(l.w_up.row(r));
        for (std::int64_t b = 0; b < W.cols; b += 32) {
            float amax = 0;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(want[b + i]));
            for (int i = 0; i < 32; ++i)
                ASSERT_NEAR(row[std::size_t(b + i)], want[b + i], amax / 127 * 0.5f + amax * 1e-3f) << r << "," << b + i;
        }
    }
    // f16 source -> f32: exact widening
    o.matrix_type = GgmlType::F32;
    const LoadedModel austen = load_safetensors_model(kAusten);
    convert_to_gguf(austen, out, o);
    const GgufFile g(out);
    const GgufTensorInfo& t = g.tensor("blk.0.ffn_gate.weight");
    ASSERT_EQ(t.type, GgmlType::F32);
    const auto* got = reinterpret_cast<const float*>(g.tensor_data(t));
    const auto* half = reinterpret_cast<const std::uint16_t*>(austen.weights.layers[0].w_gate.data);
    for (std::int64_t i = 0; i < 1408 * 512; i += 101) ASSERT_EQ(got[i], fp16_to_f32_scalar(half[i]));
    fs::remove(out);
}

// ---- biases and architectures (generated models) ------------------------------------------------

TEST(Convert, ValuesTheTargetCannotHoldAreRefused) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    // llama2.c checkpoint (f32): token_embd row 0, column 10 set to 1e6, beyond f16's 65504, and to
    // NaN (a quantizer's block scale would ignore it, and rounding it to an integer is undefined).
    std::ifstream in(kStories + "/stories260K.bin", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const std::string bin = temp_path("big_value.bin"), out = temp_path("big_value.gguf");
    for (const auto& [value, type] : {std::pair{1e6f, "f16"}, {std::nanf(""), "f16"}, {std::nanf(""), "bf16"}}) {
        std::memcpy(bytes.data() + 28 + 4 * 10, &value, 4);  // after the 28-byte header: token_embd
        std::ofstream(bin, std::ios::binary | std::ios::trunc) << bytes;
        fs::remove(out);
        const auto r = test::run_cli("convert -m " + bin + " --tokenizer " + kStories + "/tok512.bin --type " + type +
                                     " -o " + out);
        EXPECT_NE(r.exit_code, 0) << type << "\n" << r.output;
        EXPECT_NE(r.output.find("token_embd.weight row 0 column 10"), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(out)) << type;  // nothing half-written
    }
    fs::remove(bin);
}

TEST(Convert, BiasesAndArchitectures) {
    const std::string out = temp_path("tiny_bias.gguf");
    // qwen2 (NeoX in GGUF too): rows and biases kept
    {
        LoadedModel m;
        m.weights = test::tiny_model({.qkv_bias = true, .rope = RopePairs::neox});
        const ConvertSummary s = convert_to_gguf(m, out);
        EXPECT_EQ(s.arch, "qwen2");
        EXPECT_FALSE(s.permuted_qk);
        const GgufFile g(out);
        EXPECT_EQ(g.get_string("general.architecture"), "qwen2");
        EXPECT_EQ(g.get_int("qwen2.attention.head_count"), 4);
        EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "no_vocab");
        const LayerWeights& l = m.weights.layers[1];
        const GgufTensorInfo& q = g.tensor("blk.1.attn_q.weight");
        EXPECT_EQ(std::memcmp(g.tensor_data(q), l.wq.data, l.wq.n_bytes()), 0);
        const GgufTensorInfo& bk = g.tensor("blk.1.attn_k.bias");
        ASSERT_EQ(bk.n_bytes, l.bk.size() * 4);
        EXPECT_EQ(std::memcmp(g.tensor_data(bk), l.bk.data(), bk.n_bytes), 0);
        EXPECT_NE(g.find_tensor("blk.0.attn_v.bias"), nullptr);
    }
    // a llama with NeoX pairs and biases: weights and biases of Q and K permuted alike
    {
        LoadedModel m;
        m.weights = test::tiny_model({.qkv_bias = true, .rope = RopePairs::neox});
        m.weights.config.arch = ModelArch::llama;
        EXPECT_TRUE(convert_to_gguf(m, out).permuted_qk);
        const GgufFile g(out);
        const LayerWeights& l = m.weights.layers[0];
        const int D = m.weights.config.head_dim;
        const auto* bq = reinterpret_cast<const float*>(g.tensor_data(g.tensor("blk.0.attn_q.bias")));
        const auto* bk = reinterpret_cast<const float*>(g.tensor_data(g.tensor("blk.0.attn_k.bias")));
        for (std::size_t r = 0; r < l.bq.size(); ++r) ASSERT_EQ(bq[r], l.bq[std::size_t(permuted_source_row(std::int64_t(r), D))]);
        for (std::size_t r = 0; r < l.bk.size(); ++r) ASSERT_EQ(bk[r], l.bk[std::size_t(permuted_source_row(std::int64_t(r), D))]);
        const auto* bv = reinterpret_cast<const float*>(g.tensor_data(g.tensor("blk.0.attn_v.bias")));
        for (std::size_t r = 0; r < l.bv.size(); ++r) ASSERT_EQ(bv[r], l.bv[r]);
        const GgufTensorInfo& k = g.tensor("blk.0.attn_k.weight");
        const std::size_t rb = l.wk.row_bytes();
        for (std::int64_t r = 0; r < l.wk.rows; ++r)
            ASSERT_EQ(std::memcmp(g.tensor_data(k) + std::size_t(r) * rb, l.wk.row(permuted_source_row(r, D)), rb), 0);
        EXPECT_NE(g.find_tensor("output.weight"), nullptr);  // untied
    }
    // a llama with interleaved pairs: nothing permuted
    {
        LoadedModel m;
        m.weights = test::tiny_model({.tied = true});
        EXPECT_FALSE(convert_to_gguf(m, out).permuted_qk);
        const GgufFile g(out);
        const GgufTensorInfo& q = g.tensor("blk.0.attn_q.weight");
        EXPECT_EQ(std::memcmp(g.tensor_data(q), m.weights.layers[0].wq.data, q.n_bytes), 0);
        EXPECT_EQ(g.find_tensor("output.weight"), nullptr);
    }
    // qwen2 with interleaved pairs has no GGUF form
    {
        LoadedModel m;
        m.weights = test::tiny_model({.qkv_bias = true, .rope = RopePairs::interleaved});
        EXPECT_THROW(convert_to_gguf(m, out), Error);
    }
    // llama3 RoPE scaling becomes llama.cpp's rope_freqs.weight
    {
        LoadedModel m;
        m.weights = test::tiny_model({.rope = RopePairs::neox});
        m.weights.config.rope_scaling = {RopeScaling::Kind::llama3, 8.0f, 1.0f, 4.0f, 512};
        m.weights.config.rope_theta = 500000.0f;
        convert_to_gguf(m, out);
        const GgufFile g(out);
        const GgufTensorInfo& f = g.tensor("rope_freqs.weight");
        ASSERT_EQ(f.type, GgmlType::F32);
        ASSERT_EQ(f.ne, (std::vector<std::int64_t>{4}));
        // the frequencies the factors give equal those of the llama3 rule (one pair of each kind:
        // kept, blended, slowed by `factor`)
        ModelWeights factors = test::tiny_model({.rope = RopePairs::neox});
        factors.config.rope_theta = 500000.0f;
        const auto* v = reinterpret_cast<const float*>(g.tensor_data(f));
        factors.rope_freq_factors.assign(v, v + 4);
        EXPECT_EQ(factors.rope_freq_factors[0], 1.0f);
        EXPECT_GT(factors.rope_freq_factors[1], 1.0f);
        EXPECT_LT(factors.rope_freq_factors[1], 8.0f);
        EXPECT_EQ(factors.rope_freq_factors[3], 8.0f);
        const std::vector<double> want = rope_inverse_frequencies(m.weights), got = rope_inverse_frequencies(factors);
        ASSERT_EQ(want.size(), got.size());
        for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << i;
    }
    fs::remove(out);
}

TEST(Convert, BadRequestsAreErrors) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    const std::string out = temp_path("bad.gguf");
    fs::remove(out);
    LoadedModel m = load_llama2c_model(kStories + "/stories260K.bin", kStories + "/tok512.bin");
    ConvertOptions o;
    // Q8_0 needs rows of whole 32-value blocks: the FFN down projection has 172 columns
    o.matrix_type = GgmlType::Q8_0;
    try {
        convert_to_gguf(m, out, o);
        ADD_FAILURE() << "no error for Q8_0 of 172 columns";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("ffn_down"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));  // nothing half-written
    o.matrix_type = GgmlType::Q4_K;
    EXPECT_THROW(convert_to_gguf(m, out, o), Error);
    EXPECT_THROW(parse_convert_type("q4_k"), Error);
    EXPECT_THROW(parse_convert_type(""), Error);
    EXPECT_EQ(parse_convert_type("source"), std::nullopt);
    EXPECT_EQ(parse_convert_type("f16"), GgmlType::F16);
    // a vocabulary that does not fit the embedding
    m.weights.config.n_vocab = 256;
    EXPECT_THROW(convert_to_gguf(m, out, {}), Error);
    m.weights.config.n_vocab = 512;
    // a matrix that does not match the config
    m.weights.layers[2].wk.rows = 64;
    EXPECT_THROW(convert_to_gguf(m, out, {}), Error);
    m.weights.layers[2].wk.rows = 32;
    EXPECT_THROW(convert_to_gguf(m, temp_path("no_such_dir") + "/x.gguf", {}), Error);
}

TEST(Convert, Command) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k");
    AQPIM_REQUIRE_SHARED("models/stories260K");
    const std::string out = temp_path("cli.gguf");
    fs::remove(out);
    auto r = test::run_cli("convert -m " + kTiny + " -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("permuted from NeoX"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("2048 tokens"), std::string::npos) << r.output;
    EXPECT_EQ(GgufFile(out).get_int("llama.block_count"), 2);

    r = test::run_cli("convert -m " + kStories + "/stories260K.bin --type f16 --name s260 -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("already interleaved"), std::string::npos) << r.output;
    {
        const GgufFile g(out);
        EXPECT_EQ(g.get_string("general.name"), "s260");
        EXPECT_EQ(g.tensor("blk.0.attn_q.weight").type, GgmlType::F16);
        EXPECT_EQ(g.tensor("blk.0.attn_norm.weight").type, GgmlType::F32);
    }

    // bad options: each fails with a message and writes nothing
    fs::remove(out);
    for (const std::string& args :
         {"convert -m " + kTiny + " --type q3 -o " + out, "convert -m " + kTiny, "convert -o " + out,
          "convert -m " + kTiny + " -o " + out + " --bogus", "convert -m /nonexistent/model -o " + out,
          "convert -m " + kTiny + " -o " + fs::temp_directory_path().string()}) {
        r = test::run_cli(args);
        EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
        EXPECT_FALSE(r.output.empty()) << args;
        EXPECT_FALSE(fs::exists(out)) << args;
    }

    // the input is never overwritten: the checkpoint itself, or a file of the model directory
    const std::string copy = temp_path("stories_copy.bin");
    fs::copy_file(kStories + "/stories260K.bin", copy, fs::copy_options::overwrite_existing);
    r = test::run_cli("convert -m " + copy + " --tokenizer " + kStories + "/tok512.bin -o " + copy);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("refusing to overwrite"), std::string::npos) << r.output;
    EXPECT_EQ(fs::file_size(copy), fs::file_size(kStories + "/stories260K.bin"));
    r = test::run_cli("convert -m " + kTiny + " -o " + kTiny + "/model.safetensors");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("refusing to overwrite"), std::string::npos) << r.output;
    // an input named like a writer's temporary file of the output is not touched either
    const std::string tmp_named = copy + ".gguf.tmp";
    fs::copy_file(copy, tmp_named, fs::copy_options::overwrite_existing);
    r = test::run_cli("convert -m " + tmp_named + " --tokenizer " + kStories + "/tok512.bin -o " + copy + ".gguf");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(fs::file_size(tmp_named), fs::file_size(kStories + "/stories260K.bin"));
    EXPECT_EQ(GgufFile(copy + ".gguf").get_string("general.architecture"), "llama");
    fs::remove(copy);
    fs::remove(tmp_named);
}

}  // namespace
}  // namespace aqpim
