#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "aqpim/kmeans.h"
#include "pq/nearest_kernels.h"

namespace aqpim {
namespace {

/// Points and centroids with a common offset (realistic: KV channels are not centred), points
/// x [n][x_stride] (the first dim floats of each row are the point), centroids [k][dim].
struct Case {
    int n, dim, k;
    std::int64_t x_stride;
    std::vector<float> x, c, cn;
    Case(int n_, int dim_, int k_, std::int64_t stride, std::uint32_t seed)
        : n(n_), dim(dim_), k(k_), x_stride(stride) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> g(0, 1);
        x.assign(std::size_t(n) * x_stride + 16, NAN);  // NaN between rows: read only what you should
        c.resize(std::size_t(k) * dim);
        cn.assign(k, 0.0f);
        for (int j = 0; j < k; ++j)
            for (int d = 0; d < dim; ++d) {
                c[j * dim + d] = 0.5f + g(rng);
                cn[j] += c[j * dim + d] * c[j * dim + d];
            }
        for (int i = 0; i < n; ++i)
            for (int d = 0; d < dim; ++d) x[i * x_stride + d] = 0.5f + 1.2f * g(rng);
    }
    double true_dist(int i, int j) const {
        double s = 0;
        for (int d = 0; d < dim; ++d) {
            double diff = double(x[i * x_stride + d]) - c[j * dim + d];
            s += diff * diff;
        }
        return s;
    }
    /// Rounding tolerance of ||c||^2 - 2 x.c + ||x||^2 in float.
    double tol(int i, int j) const {
        double xn = 0;
        for (int d = 0; d < dim; ++d) xn += double(x[i * x_stride + d]) * x[i * x_stride + d];
        return 1e-5 * (xn + cn[j]) * (1 + dim / 8.0) + 1e-6;
    }
};

// Every level against the scalar specification over odd sizes, with and without dist: the index
// may differ only where two centroids are within rounding of each other.
TEST(Nearest, EverySimdLevelMatchesRef) {
    std::uint32_t seed = 1;
    for (int dim : {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 33, 70})
        for (int k : {1, 3, 16, 17, 256})
            for (int n : {1, 7, 16, 33, 100})
                for (std::int64_t stride : {std::int64_t(dim), std::int64_t(dim) + 3, std::int64_t(128)}) {
                    Case t(n, dim, k, stride, seed++);
                    std::vector<std::int32_t> idx_ref(n);
                    std::vector<float> dist_ref(n);
                    nearest_ref(t.x.data(), n, stride, dim, t.c.data(), t.cn.data(), k, idx_ref.data(),
                                dist_ref.data());
                    for (int i = 0; i < n; ++i) {  // ref is the brute force, up to rounding
                        double best = t.true_dist(i, 0);
                        for (int j = 1; j < k; ++j) best = std::min(best, t.true_dist(i, j));
                        ASSERT_NEAR(t.true_dist(i, idx_ref[i]), best, t.tol(i, idx_ref[i]));
                        ASSERT_NEAR(dist_ref[i], best, t.tol(i, idx_ref[i]));
                    }
                    for (SimdLevel level : supported_simd_levels()) {
                        std::vector<std::int32_t> idx(n, -1), idx2(n, -1);
                        std::vector<float> dist(n, -1);
                        nearest_kernels(level).nearest(t.x.data(), n, stride, dim, t.c.data(), t.cn.data(), k,
                                                       idx.data(), dist.data());
                        nearest_kernels(level).nearest(t.x.data(), n, stride, dim, t.c.data(), t.cn.data(), k,
                                                       idx2.data(), nullptr);
                        for (int i = 0; i < n; ++i) {
                            ASSERT_EQ(idx2[i], idx[i]);
                            ASSERT_GE(idx[i], 0);
                            ASSERT_LT(idx[i], k);
                            ASSERT_GE(dist[i], 0.0f);
                            ASSERT_NEAR(dist[i], dist_ref[i], t.tol(i, idx_ref[i]))
                                << simd_level_name(level) << " dim " << dim << " k " << k << " n " << n << " i " << i;
                            if (idx[i] == idx_ref[i]) continue;  // else: a near tie in float rounding
                            ASSERT_NEAR(t.true_dist(i, idx[i]), t.true_dist(i, idx_ref[i]), t.tol(i, idx_ref[i]))
                                << simd_level_name(level) << " dim " << dim << " k " << k << " n " << n << " i " << i;
                        }
                    }
                }
}

// Equal centroids: every level returns the lowest index (the sums are bitwise equal).
TEST(Nearest, TiesGoToTheLowestIndex) {
    const int n = 37, dim = 4, k = 16;
    Case t(n, dim, k, dim, 99);
    for (int j = 8; j < k; ++j)  // centroids 8..15 repeat 0..7, in reverse order
        for (int d = 0; d < dim; ++d) {
            t.c[j * dim + d] = t.c[(15 - j) * dim + d];
            t.cn[j] = t.cn[15 - j];
        }
    for (SimdLevel level : supported_simd_levels()) {
        std::vector<std::int32_t> idx(n, -1);
        nearest_kernels(level).nearest(t.x.data(), n, dim, dim, t.c.data(), t.cn.data(), k, idx.data(), nullptr);
        for (int i = 0; i < n; ++i) EXPECT_LT(idx[i], 8) << simd_level_name(level);
    }
    // all centroids equal: index 0 everywhere
    for (int j = 1; j < k; ++j) {
        for (int d = 0; d < dim; ++d) t.c[j * dim + d] = t.c[d];
        t.cn[j] = t.cn[0];
    }
    for (SimdLevel level : supported_simd_levels()) {
        std::vector<std::int32_t> idx(n, -1);
        nearest_kernels(level).nearest(t.x.data(), n, dim, dim, t.c.data(), t.cn.data(), k, idx.data(), nullptr);
        for (int i = 0; i < n; ++i) EXPECT_EQ(idx[i], 0) << simd_level_name(level);
    }
}

// The one-row kernel of decode steps gives nearest_avx512's index, bit for bit, in every subspace:
// random rows, centroids that tie (8..15 repeat 0..7 in reverse), and a row equal to a centroid.
TEST(Nearest, OneRowOf16CentroidsEqualsTheBlockKernel) {
    const auto levels = supported_simd_levels();
    if (std::find(levels.begin(), levels.end(), SimdLevel::avx512) == levels.end())
        GTEST_SKIP() << "no AVX-512 on this CPU: nearest_row16_avx512 cannot run";
    for (const int dsub : {1, 2, 3, 4, 8, 16, 32}) {
        const int M = 5, K = 16;
        std::vector<float> c, cn, y;
        std::mt19937 rng(dsub);
        std::normal_distribution<float> g(0, 1);
        for (int m = 0; m < M; ++m) {
            const Case t(1, dsub, K, dsub, std::uint32_t(100 * dsub + m));
            std::vector<float> cm = t.c, nm = t.cn;
            if (m % 2 == 1)  // ties
                for (int j = 8; j < K; ++j) {
                    std::copy_n(cm.begin() + (15 - j) * dsub, dsub, cm.begin() + j * dsub);
                    nm[j] = nm[15 - j];
                }
            c.insert(c.end(), cm.begin(), cm.end());
            cn.insert(cn.end(), nm.begin(), nm.end());
        }
        for (int row = 0; row < 50; ++row) {
            y.resize(std::size_t(M) * dsub);
            for (float& v : y) v = 0.5f + 1.2f * g(rng);
            if (row == 0) std::copy_n(c.begin() + 3 * dsub, dsub, y.begin());  // subspace 0: centroid 3 exactly
            std::vector<std::uint8_t> got(M);
            nearest_row16_avx512(y.data(), M, dsub, c.data(), cn.data(), got.data());
            for (int m = 0; m < M; ++m) {
                std::int32_t want = -1;
                nearest_avx512(y.data() + m * dsub, 1, dsub, dsub, c.data() + std::size_t(m) * K * dsub,
                               cn.data() + std::size_t(m) * K, K, &want, nullptr);
                ASSERT_EQ(int(got[m]), want) << "dsub " << dsub << " row " << row << " subspace " << m;
            }
        }
    }
}

// A point equal to a centroid is found with distance ~0, with positive strides (gathers) and a
// negative one (points in reverse order; the lane-by-lane path).
TEST(Nearest, ExactHitsAnyStride) {
    const int dim = 4, k = 16, n = 21;
    Case t(0, dim, k, 1, 5);
    for (std::int64_t stride : {std::int64_t(4), std::int64_t(9), std::int64_t(-6)}) {
        const std::int64_t row = stride < 0 ? -stride : stride;
        std::vector<float> buf(std::size_t(n) * row, NAN);
        float* x = stride < 0 ? buf.data() + (n - 1) * row : buf.data();
        for (int i = 0; i < n; ++i)
            for (int d = 0; d < dim; ++d) x[i * stride + d] = t.c[(i * 7 % k) * dim + d];
        for (SimdLevel level : supported_simd_levels()) {
            std::vector<std::int32_t> idx(n, -1);
            std::vector<float> dist(n, -1);
            nearest_kernels(level).nearest(x, n, stride, dim, t.c.data(), t.cn.data(), k, idx.data(), dist.data());
            for (int i = 0; i < n; ++i) {
                EXPECT_EQ(idx[i], i * 7 % k) << simd_level_name(level) << " stride " << stride;
                EXPECT_NEAR(dist[i], 0.0f, 1e-5f * (1 + t.cn[idx[i]]));
            }
        }
    }
}

TEST(Nearest, DispatchedEntryPointUsesTheActiveLevel) {
    Case t(50, 4, 16, 128, 3);
    std::vector<std::int32_t> a(50), b(50);
    std::vector<float> da(50), db(50);
    nearest_centroid(t.x.data(), 50, 128, 4, t.c.data(), t.cn.data(), 16, a.data(), da.data());
    nearest_kernels(active_simd_level())
        .nearest(t.x.data(), 50, 128, 4, t.c.data(), t.cn.data(), 16, b.data(), db.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(da, db);
    nearest_centroid(t.x.data(), 0, 128, 4, t.c.data(), t.cn.data(), 16, a.data(), nullptr);  // n = 0: nothing
}

}  // namespace
}  // namespace aqpim
