// Layer-0 capture of the shared austen-13m checkpoint: position 0 is unrotated (k = Wk h exactly),
// RoPE preserves the norm of every rotated pair, and bad inputs are errors.

#include <gtest/gtest.h>

#include <cmath>

#include "aqpim/error.h"
#include "aqpim/kv_capture.h"
#include "aqpim/safetensors.h"
#include "support/cli.h"

namespace aqpim {
namespace {

const std::string kModel = test::shared_dir() + "/models/austen-13m";

TEST(KvCapture, PositionZeroIsTheProjectionAndRopeKeepsPairNorms) {
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
    // values are not rotated: same token, same value vector
    for (int d = 0; d < 256; ++d) ASSERT_FLOAT_EQ(c.v[d], c.v[4 * 256 + d]);
}

TEST(KvCapture, BadInputsAreErrors) {
    const std::vector<std::int32_t> bad_id = {1, 4096};
    EXPECT_THROW(capture_layer0(kModel, bad_id), Error);
    const std::vector<std::int32_t> ok = {1};
    EXPECT_THROW(capture_layer0("/nonexistent", ok), Error);
    EXPECT_THROW(read_token_ids("/nonexistent.ids"), Error);
    EXPECT_THROW(synthetic_attention(10, 3, 2, 64, 1), Error);
}

}  // namespace
}  // namespace aqpim
