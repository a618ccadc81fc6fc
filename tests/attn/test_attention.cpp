// Dense attention kernels against a double-precision reference, every SIMD level against ref,
// and partial merging.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "aqpim/attention.h"
#include "aqpim/error.h"
#include "support/random.h"
#include "support/simd_guard.h"

namespace aqpim {
namespace {

// out [n_q][D] = softmax(scale * q K^T) V, in double.
std::vector<double> naive_attention(const std::vector<float>& q, int n_q, int D, const std::vector<float>& K,
                                    const std::vector<float>& V, std::int64_t n, float scale) {
    std::vector<double> out(std::size_t(n_q) * D, 0.0);
    for (int h = 0; h < n_q; ++h) {
        std::vector<double> s(n);
        double mx = -1e300;
        for (std::int64_t t = 0; t < n; ++t) {
            double dot = 0;
            for (int d = 0; d < D; ++d) dot += double(q[h * D + d]) * K[t * D + d];
            s[t] = dot * scale;
            mx = std::max(mx, s[t]);
        }
        double z = 0;
        for (auto& x : s) z += (x = std::exp(x - mx));
        for (std::int64_t t = 0; t < n; ++t)
            for (int d = 0; d < D; ++d) out[h * D + d] += s[t] / z * V[t * D + d];
    }
    return out;
}

/// attend_dense_f32 of n_q query heads over n rows at one kernel level, finalized: [n_q][D].
std::vector<float> dense_f32_at(SimdLevel level, const std::vector<float>& q, int n_q, int D, const std::vector<float>& K,
                                const std::vector<float>& V, std::int64_t n, float scale) {
    test::SimdLevelGuard guard(level);
    AttentionPartial part(n_q, D);
    attend_dense_f32(q.data(), n_q, D, K.data(), V.data(), n, scale, part);
    std::vector<float> out(std::size_t(n_q) * D);
    part.finalize(out.data());
    return out;
}

TEST(Attention, DenseF32MatchesNaiveAtEveryLevel) {
    for (int D : {8, 20, 64, 128})
        for (int n_q : {1, 3, 4, 7})
            for (std::int64_t n : {1, 5, 127, 128, 300}) {
                auto q = test::gaussian(std::size_t(n_q) * D, 1), K = test::gaussian(n * D, 2), V = test::gaussian(n * D, 3);
                const float scale = 1.0f / std::sqrt(float(D));
                auto expect = naive_attention(q, n_q, D, K, V, n, scale);
                for (SimdLevel level : supported_simd_levels()) {
                    const std::vector<float> out = dense_f32_at(level, q, n_q, D, K, V, n, scale);
                    for (std::size_t i = 0; i < out.size(); ++i)
                        ASSERT_NEAR(out[i], expect[i], 2e-5) << simd_level_name(level) << " D=" << D << " n_q=" << n_q << " n=" << n;
                }
            }
}

TEST(Attention, DenseF16MatchesNaiveOnRoundedRows) {
    // D = 128 and 256: the unmasked (full 64-dim slices, values in chunks of rows) kernels; 20 and
    // 72: the masked tails.
    for (auto [D, n_q] : {std::pair{128, 4}, std::pair{256, 2}, std::pair{20, 3}, std::pair{72, 5}}) {
    const std::int64_t n = 517;
    auto q = test::gaussian(n_q * D, 4), K = test::gaussian(n * D, 5), V = test::gaussian(n * D, 6);
    std::vector<f16_t> Kh(K.size()), Vh(V.size());
    for (std::size_t i = 0; i < K.size(); ++i) {
        Kh[i] = f32_to_fp16_scalar(K[i]);
        Vh[i] = f32_to_fp16_scalar(V[i]);
        K[i] = fp16_to_f32_scalar(Kh[i]);  // the reference sees exactly the stored values
        V[i] = fp16_to_f32_scalar(Vh[i]);
    }
    const float scale = 0.088f;
    auto expect = naive_attention(q, n_q, D, K, V, n, scale);
    for (SimdLevel level : supported_simd_levels()) {
        test::SimdLevelGuard guard(level);
        AttentionPartial part(n_q, D);
        attend_dense_f16(q.data(), n_q, D, Kh.data(), Vh.data(), n, scale, part);
        std::vector<float> out(n_q * D);
        part.finalize(out.data());
        for (std::size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], expect[i], 2e-5) << simd_level_name(level) << " D=" << D << " n_q=" << n_q;
    }
    }
}

TEST(Attention, SoftmaxIsStableForHugeScores) {
    // scores around 1e4 would overflow a naive exp; the online max keeps weights finite
    const int D = 16, n_q = 2;
    const std::int64_t n = 300;
    auto q = test::gaussian(n_q * D, 7, 100.0f), K = test::gaussian(n * D, 8, 10.0f), V = test::gaussian(n * D, 9);
    auto expect = naive_attention(q, n_q, D, K, V, n, 1.0f);
    for (SimdLevel level : supported_simd_levels()) {
        const std::vector<float> out = dense_f32_at(level, q, n_q, D, K, V, n, 1.0f);
        for (std::size_t i = 0; i < out.size(); ++i) {
            ASSERT_TRUE(std::isfinite(out[i]));
            ASSERT_NEAR(out[i], expect[i], 1e-4) << simd_level_name(level);
        }
    }
}

TEST(Attention, ANanKeyPoisonsTheOutputAtEveryLevel) {
    // A NaN in the cache (broken weights upstream) must show, not vanish: the vectorised exp once
    // clamped a NaN score to -87 and gave it weight 0 on AVX-512, where ref gives NaN.
    const int D = 16, n_q = 2;
    const std::int64_t n = 40;
    auto q = test::gaussian(n_q * D, 11), K = test::gaussian(n * D, 12), V = test::gaussian(n * D, 13);
    K[std::size_t(17 * D + 3)] = std::nanf("");
    for (SimdLevel level : supported_simd_levels())
        for (float x : dense_f32_at(level, q, n_q, D, K, V, n, 1.0f)) ASSERT_TRUE(std::isnan(x)) << simd_level_name(level);
}

TEST(Attention, SoftmaxTileMatchesRef) {
    for (std::int64_t n_valid : {0, 1, 15, 16, 17, 100, 256})
        for (SimdLevel level : supported_simd_levels()) {
            const int n_q = 3;
            const std::int64_t stride = 260, n_cols = (n_valid + 31) / 32 * 32;
            auto s0 = test::gaussian(n_q * stride, 10, 3.0f);
            auto s1 = s0;
            float max0[3] = {0.5f, -INFINITY, 10.0f}, sum0[3] = {2.0f, 0.0f, 1.0f}, alpha0[3];
            float max1[3] = {0.5f, -INFINITY, 10.0f}, sum1[3] = {2.0f, 0.0f, 1.0f}, alpha1[3];
            attn_kernels(SimdLevel::ref).softmax_tile(s0.data(), stride, n_q, n_valid, n_cols, max0, sum0, alpha0);
            attn_kernels(level).softmax_tile(s1.data(), stride, n_q, n_valid, n_cols, max1, sum1, alpha1);
            for (int h = 0; h < n_q; ++h) {
                ASSERT_EQ(max0[h], max1[h]);
                ASSERT_NEAR(sum1[h], sum0[h], 1e-5 * sum0[h]) << simd_level_name(level);
                ASSERT_NEAR(alpha1[h], alpha0[h], 1e-6);
                for (std::int64_t t = 0; t < n_cols; ++t)
                    ASSERT_NEAR(s1[h * stride + t], s0[h * stride + t], 1e-6f * (1 + s0[h * stride + t]))
                        << simd_level_name(level) << " n_valid=" << n_valid << " t=" << t;
            }
        }
}

TEST(Attention, DenseScoresMatchRefForEveryHeadGroupAndRowCount) {
    // The AVX-512 scores run 16 / n_q rows per step for n_q = 1, 2, 4 (D = 64, 128, 256) and two
    // rows at a time otherwise; every head group (6 = 4 + 2, 7 = 4 + 3), every D class and row
    // counts around the step sizes, f32 and f16 rows, each score into its own slot.
    for (int D : {64, 128, 256, 40})
        for (int n_q : {1, 2, 3, 4, 6, 7})
            for (std::int64_t n : {1, 7, 16, 33, 130}) {
                const std::int64_t stride = n + 3;
                auto q = test::gaussian(std::size_t(n_q) * D, 14), K = test::gaussian(n * D, 15);
                std::vector<f16_t> Kh(K.size());
                for (std::size_t i = 0; i < K.size(); ++i) Kh[i] = f32_to_fp16_scalar(K[i]);
                std::vector<float> ref32(n_q * stride, -7.0f), ref16 = ref32;
                attn_kernels(SimdLevel::ref).dense_scores_f32(q.data(), n_q, D, K.data(), n, ref32.data(), stride);
                attn_kernels(SimdLevel::ref).dense_scores_f16(q.data(), n_q, D, Kh.data(), n, ref16.data(), stride);
                for (SimdLevel level : supported_simd_levels()) {
                    std::vector<float> got32(n_q * stride, -7.0f), got16 = got32;
                    attn_kernels(level).dense_scores_f32(q.data(), n_q, D, K.data(), n, got32.data(), stride);
                    attn_kernels(level).dense_scores_f16(q.data(), n_q, D, Kh.data(), n, got16.data(), stride);
                    for (std::size_t i = 0; i < got32.size(); ++i) {
                        ASSERT_NEAR(got32[i], ref32[i], 2e-5f * (1 + std::fabs(ref32[i])))
                            << simd_level_name(level) << " f32 D=" << D << " n_q=" << n_q << " n=" << n << " i=" << i;
                        ASSERT_NEAR(got16[i], ref16[i], 2e-5f * (1 + std::fabs(ref16[i])))
                            << simd_level_name(level) << " f16 D=" << D << " n_q=" << n_q << " n=" << n << " i=" << i;
                    }
                }
            }
}

TEST(Attention, MergingSegmentsEqualsOnePass) {
    const int D = 32, n_q = 4;
    const std::int64_t n = 400;
    auto q = test::gaussian(n_q * D, 11), K = test::gaussian(n * D, 12), V = test::gaussian(n * D, 13);
    AttentionPartial whole(n_q, D), a(n_q, D), b(n_q, D);
    attend_dense_f32(q.data(), n_q, D, K.data(), V.data(), n, 0.3f, whole);
    attend_dense_f32(q.data(), n_q, D, K.data(), V.data(), 150, 0.3f, a);
    attend_dense_f32(q.data(), n_q, D, K.data() + 150 * D, V.data() + 150 * D, n - 150, 0.3f, b);
    AttentionPartial empty(n_q, D);
    a.merge(empty);  // merging nothing changes nothing
    b.merge(a);
    std::vector<float> x(n_q * D), y(n_q * D);
    whole.finalize(x.data());
    b.finalize(y.data());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5);
}

TEST(Attention, BadShapesAreErrors) {
    AttentionPartial part(2, 8);
    std::vector<float> q(16), kv(80);
    EXPECT_THROW(attend_dense_f32(q.data(), 3, 8, kv.data(), kv.data(), 10, 1.0f, part), Error);
    EXPECT_THROW(attend_dense_f32(q.data(), 2, 8, kv.data(), kv.data(), -1, 1.0f, part), Error);
    AttentionPartial other(2, 16);
    EXPECT_THROW(part.merge(other), Error);
}

}  // namespace
}  // namespace aqpim
