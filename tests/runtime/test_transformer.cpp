// The forward pass on random tiny models: batched prefill equals token-by-token decode, sequences in
// one batch equal separate runs, RoPE frequency rules.

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "aqpim/error.h"
#include "aqpim/transformer.h"
#include "support/tiny_model.h"

using namespace aqpim;

namespace {

std::vector<float> prefill_logits(Transformer& t, const std::vector<std::int32_t>& ids) {
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f32);
    cache->add_sequence(0);
    std::vector<float> logits;
    const BatchSequence s{0, ids, true};
    t.forward({&s, 1}, *cache, logits);
    return logits;
}

std::vector<float> stepwise_logits(Transformer& t, const std::vector<std::int32_t>& ids) {
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f32);
    cache->add_sequence(0);
    std::vector<float> all, logits;
    for (std::int32_t id : ids) {
        const BatchSequence s{0, {&id, 1}, false};
        t.forward({&s, 1}, *cache, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * (1.0f + std::abs(b[i]))) << "at " << i;
}

const std::vector<std::int32_t> kIds = {1, 5, 9, 63, 0, 17, 17, 42, 8, 30, 2, 11, 60, 33};

}  // namespace

TEST(Transformer, PrefillEqualsStepwiseDecode) {
    for (const test::TinyModelShape& shape :
         {test::TinyModelShape{}, test::TinyModelShape{.qkv_bias = true, .tied = true, .rope = RopePairs::neox},
          test::TinyModelShape{.n_head = 4, .n_kv_head = 4}, test::TinyModelShape{.n_head = 8, .n_kv_head = 1}}) {
        const ModelWeights w = test::tiny_model(shape);
        Transformer t(w);
        const std::vector<float> a = prefill_logits(t, kIds), b = stepwise_logits(t, kIds);
        ASSERT_EQ(a.size(), kIds.size() * std::size_t(w.config.n_vocab));
        expect_close(a, b, 1e-4f);
    }
}

TEST(Transformer, BatchedSequencesEqualSeparateRuns) {
    const ModelWeights w = test::tiny_model({});
    Transformer t(w);
    const std::vector<std::int32_t> a(kIds.begin(), kIds.begin() + 9), b(kIds.begin() + 4, kIds.end());
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f32);
    cache->add_sequence(4);
    cache->add_sequence(9);
    // Step 1: both prefill; step 2: one decode row each.
    std::vector<float> logits;
    const std::vector<BatchSequence> step1 = {{4, {a.data(), 8}, true}, {9, {b.data(), 5}, true}};
    t.forward(step1, *cache, logits);
    const std::vector<float> batched1 = logits;
    const std::vector<BatchSequence> step2 = {{9, {b.data() + 5, 1}, false}, {4, {a.data() + 8, 1}, false}};
    t.forward(step2, *cache, logits);

    const int V = w.config.n_vocab;
    const std::vector<float> ra = prefill_logits(t, a), rb = prefill_logits(t, std::vector(b.begin(), b.begin() + 6));
    expect_close(std::vector(batched1.begin(), batched1.begin() + 8 * V), std::vector(ra.begin(), ra.begin() + 8 * V), 1e-4f);
    expect_close(std::vector(batched1.begin() + 8 * V, batched1.end()), std::vector(rb.begin(), rb.begin() + 5 * V), 1e-4f);
    expect_close(std::vector(logits.begin(), logits.begin() + V), std::vector(rb.begin() + 5 * V, rb.end()), 1e-4f);
    expect_close(std::vector(logits.begin() + V, logits.end()), std::vector(ra.begin() + 8 * V, ra.end()), 1e-4f);
}

TEST(Transformer, F16CacheStaysCloseToF32) {
    const ModelWeights w = test::tiny_model({});
    Transformer t(w);
    auto c16 = make_dense_kv_cache(t.kv_shape(), DenseKvType::f16);
    c16->add_sequence(0);
    std::vector<float> l16;
    const BatchSequence s{0, kIds, true};
    t.forward({&s, 1}, *c16, l16);
    const std::vector<float> l32 = prefill_logits(t, kIds);
    double max_diff = 0.0;
    for (std::size_t i = 0; i < l32.size(); ++i) max_diff = std::max(max_diff, double(std::abs(l16[i] - l32[i])));
    EXPECT_GT(max_diff, 0.0);  // the rounding is real
    EXPECT_LT(max_diff, 0.05);
}

TEST(Transformer, BadTokensAreErrors) {
    const ModelWeights w = test::tiny_model({});
    Transformer t(w);
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f32);
    cache->add_sequence(0);
    std::vector<float> logits;
    const std::vector<std::int32_t> bad = {1, 64};
    const BatchSequence s{0, bad, false};
    EXPECT_THROW(t.forward({&s, 1}, *cache, logits), Error);
    const BatchSequence unknown{3, kIds, false};
    EXPECT_THROW(t.forward({&unknown, 1}, *cache, logits), Error);
}

TEST(Transformer, ScratchIsCountedAndStopsGrowingOnceWarm) {
    const ModelWeights w = test::tiny_model({});
    Transformer t(w, 1);
    EXPECT_EQ(t.scratch_bytes(), 0u);  // nothing run yet
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f16);
    cache->add_sequence(0);
    std::vector<float> logits;
    const BatchSequence prompt{0, kIds, false};
    t.forward({&prompt, 1}, *cache, logits);
    const std::size_t after_prompt = t.scratch_bytes();
    EXPECT_GT(after_prompt, 0u);  // the dense tiles and scores, the prepared activations
    for (std::int32_t id : {3, 4, 5}) {  // decode steps need no more than the prompt's call did
        const BatchSequence step{0, {&id, 1}, false};
        t.forward({&step, 1}, *cache, logits);
        EXPECT_EQ(t.scratch_bytes(), after_prompt);
    }
}

TEST(Rope, FrequencyRules) {
    ModelWeights w = test::tiny_model({.n_embd = 64, .n_head = 2, .n_kv_head = 1});  // head_dim 32
    w.config.rope_theta = 500000.0f;
    const std::vector<double> plain = rope_inverse_frequencies(w);
    ASSERT_EQ(plain.size(), 16u);
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(plain[i], std::pow(500000.0, -2.0 * i / 32), 1e-15);

    w.config.rope_scaling = {RopeScaling::Kind::linear, 4.0f};
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(rope_inverse_frequencies(w)[i], plain[i] / 4, 1e-15);

    // Llama 3.1 rule (factor 8, low 1, high 4, original 8192): short wavelengths kept, long ones / 8.
    w.config.rope_scaling = {RopeScaling::Kind::llama3, 8.0f, 1.0f, 4.0f, 8192};
    const std::vector<double> l3 = rope_inverse_frequencies(w);
    for (int i = 0; i < 16; ++i) {
        const double wavelen = 2 * std::numbers::pi / plain[i];
        if (wavelen < 8192 / 4.0) EXPECT_DOUBLE_EQ(l3[i], plain[i]);
        else if (wavelen > 8192 / 1.0) EXPECT_NEAR(l3[i], plain[i] / 8, 1e-18);
        else EXPECT_TRUE(l3[i] < plain[i] && l3[i] > plain[i] / 8);
    }
    // Per-frequency factors from a GGUF file take precedence.
    w.rope_freq_factors.assign(16, 2.0f);
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(rope_inverse_frequencies(w)[i], plain[i] / 2, 1e-15);
    w.rope_freq_factors.assign(3, 1.0f);
    EXPECT_THROW(rope_inverse_frequencies(w), Error);
}
