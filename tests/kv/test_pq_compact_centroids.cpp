// Centroids rounded to f16 or int8 for the PQ cache's cb= (kv/pq_compact_centroids.h).

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kv/pq_compact_centroids.h"
#include "support/simd_guard.h"

namespace aqpim::kv {
namespace {

std::vector<float> random_centroids(int M, int ksub, int dsub, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g;
    std::vector<float> c(std::size_t(M) * ksub * dsub);
    for (int m = 0; m < M; ++m)  // each subspace its own range, as trained codebooks have
        for (int k = 0; k < ksub; ++k)
            for (int j = 0; j < dsub; ++j) c[(std::size_t(m) * ksub + k) * dsub + j] = g(rng) * float(1 + m * 3 + j);
    return c;
}

TEST(CompactCentroids, Int8KeepsEveryValueWithinHalfAStepOfItsDimension) {
    const int M = 4, ksub = 16, dsub = 3;
    std::vector<float> c = random_centroids(M, ksub, dsub, 7);
    for (int k = 0; k < ksub; ++k) c[(std::size_t(2) * ksub + k) * dsub + 1] = 0;  // one dimension all zero
    const CompactCentroids r = CompactCentroids::round(CodebookStorage::int8, c.data(), M, ksub, dsub);
    ASSERT_EQ(r.scale.size(), std::size_t(M * dsub));
    EXPECT_EQ(r.scale[2 * dsub + 1], 0.0f);
    EXPECT_EQ(r.bytes(), std::size_t(ksub) * M * dsub + std::size_t(M) * dsub * 4);
    EXPECT_EQ(r.bytes(), centroid_bytes(CodebookStorage::int8, ksub, std::size_t(M) * dsub));
    std::vector<float> wide;
    r.widen(wide);
    ASSERT_EQ(wide.size(), c.size());
    for (int m = 0; m < M; ++m)
        for (int j = 0; j < dsub; ++j) {
            const float step = r.scale[std::size_t(m) * dsub + j];
            float biggest = 0;
            for (int k = 0; k < ksub; ++k) {
                const std::size_t i = (std::size_t(m) * ksub + k) * dsub + j;
                EXPECT_LE(std::fabs(wide[i] - c[i]), 0.5f * step * 1.0001f) << m << " " << k << " " << j;
                biggest = std::max(biggest, std::fabs(c[i]));
            }
            EXPECT_FLOAT_EQ(step * 127, biggest);  // the largest value of a dimension is exact
        }
}

TEST(CompactCentroids, Int8WidensToEachCodeTimesTheScaleOfItsDimension) {
    // The widening's fast path (dsub dividing 16; a kernel per SIMD level) and its general one, 4-
    // and 8-bit codebooks: every level gives each value's one product, bit for bit.
    for (const SimdLevel level : supported_simd_levels())
    for (const int ksub : {16, 256})
        for (const int dsub : {1, 2, 3, 4, 8, 16, 32}) {
            test::SimdLevelGuard guard(level);
            const int M = 3;
            const std::vector<float> c = random_centroids(M, ksub, dsub, 11);
            const CompactCentroids r = CompactCentroids::round(CodebookStorage::int8, c.data(), M, ksub, dsub);
            std::vector<float> wide;
            r.widen(wide);
            ASSERT_EQ(wide.size(), c.size());
            for (int m = 0; m < M; ++m)
                for (int k = 0; k < ksub; ++k)
                    for (int j = 0; j < dsub; ++j) {
                        const std::size_t i = (std::size_t(m) * ksub + k) * dsub + j;
                        ASSERT_EQ(wide[i], float(r.i8[i]) * r.scale[std::size_t(m) * dsub + j])
                            << simd_level_name(level) << " ksub " << ksub << " dsub " << dsub << " value " << i;
                    }
        }
}

TEST(CompactCentroids, F16IsTheHalfRoundingOfEachValue) {
    const int M = 2, ksub = 16, dsub = 4;
    const std::vector<float> c = random_centroids(M, ksub, dsub, 9);
    const CompactCentroids r = CompactCentroids::round(CodebookStorage::f16, c.data(), M, ksub, dsub);
    EXPECT_EQ(r.bytes(), c.size() * 2);
    std::vector<float> wide;
    r.widen(wide);
    for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(wide[i], fp16_to_f32_scalar(f32_to_fp16_scalar(c[i])));
}

}  // namespace
}  // namespace aqpim::kv
