// Layer-0 capture of the shared austen-13m checkpoint: position 0 is unrotated (k = Wk h exactly),
// RoPE preserves the norm of every rotated pair, and bad inputs are errors.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "aqpim/error.h"
#include "aqpim/kv_capture.h"
#include "aqpim/safetensors.h"
#include "support/cli.h"

namespace aqpim {
namespace {

const std::string kModel = test::shared_dir() + "/models/austen-13m";

TEST(KvCapture, PositionZeroIsTheProjectionAndRopeKeepsPairNorms) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    const std::vector<std::int32_t> ids = {535, 4051, 535, 13, 535};  // token 535 at positions 0, 2, 4
    CapturedAttention c = capture_layer0(kModel, ids);
    ASSERT_EQ(c.head_dim, 128);
    ASSERT_EQ(c.n_kv_head, 2);
    // independent k at position 0 from the raw tensors
    SafetensorsFile st(kModel + "/model.safetensors");
    auto embed = st.read_f32("model.embed_tokens.weight", {4096, 512});
    auto norm = st.read_f32("model.layers.0.input_layernorm.weight", {512});
    auto wk = st.read_f32("model.layers.0.self_attn.k_proj.weight", {256, 512});
    std::vector<double> h(512);
    double ss = 0;
    for (int i = 0; i < 512; ++i) ss += double(embed[535 * 512 + i]) * embed[535 * 512 + i];
    for (int i = 0; i < 512; ++i) h[i] = embed[535 * 512 + i] / std::sqrt(ss / 512 + 1e-5) * norm[i];
    for (int o = 0; o < 256; ++o) {
        double k = 0;
        for (int i = 0; i < 512; ++i) k += wk[o * 512 + i] * h[i];
        ASSERT_NEAR(c.k[o], k, 1e-3 * (1 + std::fabs(k))) << "output " << o;
    }
    // same token at positions 2 and 4: each NeoX pair (i, i+64) keeps its norm, the vector changes
    for (int pos : {2, 4})
        for (int ih = 0; ih < 2; ++ih) {
            const float* k0 = c.k.data() + ih * 128;
            const float* kp = c.k.data() + (pos * 2 + ih) * 128;
            double moved = 0;
            for (int i = 0; i < 64; ++i) {
                const double n0 = std::hypot(k0[i], k0[i + 64]), np = std::hypot(kp[i], kp[i + 64]);
                ASSERT_NEAR(n0, np, 1e-3 * (1 + n0));
                moved += std::fabs(k0[i] - kp[i]);
            }
            EXPECT_GT(moved, 1e-2);
        }
    // values are not rotated: same token, same value vector (up to the prefill matmul's rounding,
    // which on some BLAS kernels depends on the row's place in the batch: ~1e-7 relative)
    for (int d = 0; d < 256; ++d) ASSERT_NEAR(c.v[d], c.v[4 * 256 + d], 1e-5 * (1 + std::fabs(c.v[d])));
}

TEST(KvCapture, AnyModelTheRuntimeReads) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    // austen-13m converted to GGUF f16: the same values (up to f16 weights), keys in llama.cpp's
    // interleaved pair order, so each pair (2i, 2i+1) of the GGUF is the pair (i, i+64) of the checkpoint
    const std::vector<std::int32_t> ids = {1, 535, 4051, 13, 535, 99};
    const CapturedAttention st = capture_layer0(kModel, ids);
    const CapturedAttention gg = capture_layer0(kModel + "/austen-13m-f16.gguf", ids);
    EXPECT_EQ(st.rope_pairs, RopePairs::neox);
    EXPECT_EQ(gg.rope_pairs, RopePairs::interleaved);
    ASSERT_EQ(gg.v.size(), st.v.size());
    for (std::size_t i = 0; i < st.v.size(); ++i) ASSERT_NEAR(gg.v[i], st.v[i], 1e-2 * (1 + std::fabs(st.v[i]))) << i;
    for (std::size_t row = 0; row < st.k.size() / 128; ++row)
        for (int i = 0; i < 64; ++i) {
            ASSERT_NEAR(gg.k[row * 128 + 2 * i], st.k[row * 128 + i], 1e-2 * (1 + std::fabs(st.k[row * 128 + i])));
            ASSERT_NEAR(gg.k[row * 128 + 2 * i + 1], st.k[row * 128 + i + 64], 1e-2 * (1 + std::fabs(st.k[row * 128 + i + 64])));
        }
    // queries of every head are filled: no head's rows left at zero
    for (int h = 0; h < gg.n_head; ++h) {
        double norm = 0;
        for (int d = 0; d < gg.head_dim; ++d) norm += std::fabs(gg.q[(std::size_t(ids.size() - 1) * gg.n_head + h) * gg.head_dim + d]);
        EXPECT_GT(norm, 0.0) << "head " << h;
    }
    // a llama2.c checkpoint
    const std::vector<std::int32_t> small_ids = {1, 35, 401, 13};
    const CapturedAttention l2 = capture_layer0(test::shared_dir() + "/models/stories260K/stories260K.bin", small_ids);
    EXPECT_EQ(l2.head_dim, 8);
    EXPECT_EQ(l2.k.size(), small_ids.size() * l2.n_kv_head * 8);
    // the capture takes token ids: a checkpoint with no vocabulary beside it is enough
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "aqpim_capture_alone";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(test::shared_dir() + "/models/stories260K/stories260K.bin", dir / "stories.bin");
    EXPECT_EQ(capture_layer0((dir / "stories.bin").string(), small_ids).k, l2.k);
    std::filesystem::remove_all(dir);
}

TEST(KvCapture, BadInputsAreErrors) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    const std::vector<std::int32_t> bad_id = {1, 4096};
    EXPECT_THROW(capture_layer0(kModel, bad_id), Error);
    const std::vector<std::int32_t> ok = {1};
    EXPECT_THROW(capture_layer0("/nonexistent", ok), Error);
    EXPECT_THROW(read_token_ids("/nonexistent.ids"), Error);
    EXPECT_THROW(synthetic_attention(10, 3, 2, 64, 1), Error);
}

}  // namespace
}  // namespace aqpim
