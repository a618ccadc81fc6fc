// TurboQuant / QJL codes (src/kv/turbo_*): Lloyd-Max codebooks against the Gaussian limit and
// exact low-dimensional cases, the decode kernels of every SIMD level against ref, the code's
// distortion against the paper's, extended rows against DEQUANT, and unbiasedness of the QJL
// estimator. The cache is tested in test_turbo_kv.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "aqpim/error.h"
#include "kv/scalar_codec.h"
#include "kv/turbo_codec.h"
#include "kv/turbo_kernels.h"
#include "kv/turbo_lloyd_max.h"
#include "support/random.h"

using namespace aqpim;
using namespace aqpim::kv;

namespace {

double dot(const float* a, const float* b, int n) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
    return s;
}

/// Estimated <q, x> of one coded row: the prepared query against the decoded extended row.
double estimate(const TurboStreamCoder& c, const std::vector<float>& q, const std::vector<float>& x) {
    std::vector<std::uint8_t> row(c.row_bytes().total());
    std::vector<float> qe(c.ext_dim()), ke(c.ext_dim());
    c.encode(x.data(), nullptr, row.data());
    c.decode_ext(row.data(), 1, ke.data());
    c.prepare_query(q.data(), nullptr, qe.data());
    return dot(qe.data(), ke.data(), c.ext_dim());
}

}  // namespace

// ---- codebooks -----------------------------------------------------------------------------------

TEST(TurboLloydMax, HighDimensionIsTheGaussianLloydMaxQuantizer) {
    // √dim · x tends to N(0, 1): the codebooks tend to the Gaussian Lloyd-Max quantizers (Max 1960) and
    // dim · mse to their distortions 0.3634, 0.1175, 0.03454, 0.009497 (the paper's D_mse for b = 1..4);
    // at dim 16384 the Beta's lighter tails move the outer centroids by about 1e-4 relative.
    const std::vector<std::vector<double>> gauss = {
        {0.7979},
        {0.4528, 1.5104},
        {0.2451, 0.7560, 1.3439, 2.1520},
        {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326}};
    const double distortion[] = {0.3634, 0.1175, 0.03454, 0.009497};
    const int dim = 16384;
    for (int b = 1; b <= 4; ++b) {
        const SphereCodebook& cb = sphere_codebook(dim, b);
        ASSERT_EQ(cb.centroids.size(), std::size_t(1) << b);
        const int half = 1 << (b - 1);
        for (int k = 0; k < half; ++k) {
            EXPECT_NEAR(std::sqrt(double(dim)) * cb.centroids[half + k], gauss[b - 1][k], 5e-4) << "b " << b << " k " << k;
            EXPECT_FLOAT_EQ(cb.centroids[half - 1 - k], -cb.centroids[half + k]);
        }
        EXPECT_NEAR(dim * cb.mse, distortion[b - 1], 1e-3 * distortion[b - 1]) << b;
    }
}

TEST(TurboLloydMax, LowDimensionsAreTheExactBetaQuantizers) {
    // dim 3: x is uniform on [-1, 1], whose Lloyd-Max quantizer is uniform with centroids -1 + (2k+1)/K
    // and mse 1 / (3 K²). dim 2: the arcsine density; its 1-bit centroid is E[x | x > 0] = 2/π.
    for (int b = 1; b <= 4; ++b) {
        const SphereCodebook& cb = sphere_codebook(3, b);
        const int K = 1 << b;
        for (int k = 0; k < K; ++k) EXPECT_NEAR(cb.centroids[k], -1.0 + (2.0 * k + 1) / K, 1e-6) << b << " " << k;
        EXPECT_NEAR(cb.mse, 1.0 / (3.0 * K * K), 1e-8) << b;
        for (int k = 0; k + 1 < K; ++k) EXPECT_EQ(cb.index(cb.centroids[k]), k);
    }
    EXPECT_NEAR(sphere_codebook(2, 1).centroids[1], 2 / M_PI, 1e-6);
    EXPECT_EQ(sphere_codebook(64, 0).centroids, std::vector<float>{0.0f});
    EXPECT_THROW(sphere_codebook(1, 2), Error);
    EXPECT_THROW(sphere_codebook(8, 9), Error);
}

// ---- decode kernels --------------------------------------------------------------------------------

TEST(TurboKernels, EveryLevelEqualsRefOnOddSizes) {
    // Codes packed by pack_bits (the row layout), every width the codebooks use and beyond, counts
    // that end inside a byte and inside a vector step; the ref kernel against the unpacked codes.
    const std::vector<float> c = test::gaussian(256, 71);
    for (int bits : {1, 2, 3, 4, 5, 8})
        for (int n : {1, 3, 7, 8, 13, 16, 17, 31, 64, 100, 128}) {
            const std::vector<std::uint8_t> q = test::random_codes(std::size_t(n), 1 << bits, std::uint64_t(bits * 131 + n));
            std::vector<std::uint8_t> packed((std::size_t(n) * bits + 7) / 8);
            pack_bits(q.data(), n, bits, packed.data());
            std::vector<float> want(n);
            for (int j = 0; j < n; ++j) want[j] = 0.75f * c[q[j]];
            for (SimdLevel level : supported_simd_levels()) {
                std::vector<float> got(n + 1, 42.0f);
                turbo_kernels(level).centroids(packed.data(), n, bits, c.data(), 0.75f, got.data());
                EXPECT_EQ(got[n], 42.0f) << "wrote past n";
                got.pop_back();
                EXPECT_EQ(got, want) << simd_level_name(level) << " bits " << bits << " n " << n;
            }
        }
    for (int m : {1, 5, 8, 9, 16, 23, 64, 100, 256}) {
        const std::vector<std::uint8_t> b = test::random_codes(std::size_t(m), 2, std::uint64_t(m));
        std::vector<std::uint8_t> packed((std::size_t(m) + 7) / 8);
        pack_bits(b.data(), m, 1, packed.data());
        std::vector<float> want(m);
        for (int i = 0; i < m; ++i) want[i] = b[i] ? 0.5f : -0.5f;
        for (SimdLevel level : supported_simd_levels()) {
            std::vector<float> got(m + 1, 42.0f);
            turbo_kernels(level).signs(packed.data(), m, 0.5f, got.data());
            EXPECT_EQ(got[m], 42.0f) << "wrote past m";
            got.pop_back();
            EXPECT_EQ(got, want) << simd_level_name(level) << " m " << m;
        }
    }
}

// ---- the code --------------------------------------------------------------------------------------

TEST(TurboCodec, DistortionOfUnitVectorsIsThePapers) {
    // E ‖x - x̃‖² / ‖x‖² of TurboQuant_mse over arbitrary (here Gaussian, then one spiky) vectors is the
    // codebook's dim · mse (the randomized Hadamard rotation makes every input look uniform on the
    // sphere), and below the paper's bound √3 π / 2 · 4^-b.
    const int d = 128, n = 400;
    const std::vector<float> x = test::gaussian(std::size_t(d) * n, 5);
    for (int b = 1; b <= 4; ++b) {
        const TurboStreamCoder c(d, {{d, b, 0}}, 77);
        std::vector<std::uint8_t> rows(std::size_t(n) * c.row_bytes().total());
        std::vector<float> y(x.size());
        for (int t = 0; t < n; ++t) c.encode(x.data() + t * d, nullptr, rows.data() + t * c.row_bytes().total());
        c.decode(rows.data(), n, nullptr, y.data());
        double err = 0;
        for (int t = 0; t < n; ++t) {
            double e = 0, s = 0;
            for (int i = 0; i < d; ++i) {
                e += (x[t * d + i] - y[t * d + i]) * double(x[t * d + i] - y[t * d + i]);
                s += double(x[t * d + i]) * x[t * d + i];
            }
            err += e / s / n;
        }
        const double theory = d * sphere_codebook(d, b).mse;
        EXPECT_NEAR(err, theory, 0.06 * theory) << "b " << b;
        EXPECT_LT(err, std::sqrt(3.0) * M_PI / 2 * std::pow(4.0, -b)) << "b " << b;
        // A one-hot vector has the same distortion after rotation (within the spread of 16 coordinates).
        std::vector<float> spike(d, 0.0f), back(d);
        spike[17] = 5.0f;
        std::vector<std::uint8_t> row(c.row_bytes().total());
        c.encode(spike.data(), nullptr, row.data());
        c.decode(row.data(), 1, nullptr, back.data());
        double e = 0;
        for (int i = 0; i < d; ++i) e += (back[i] - spike[i]) * double(back[i] - spike[i]);
        EXPECT_LT(e / 25.0, 2.5 * theory) << "b " << b;
    }
}

TEST(TurboCodec, ExtendedRowsAndQueriesGiveTheDecodedInnerProducts) {
    // The rotated-domain score q_ext · k_ext equals <q, DEQUANT(k)> for every kind of part (split
    // rows, TurboQuant_prod, pure QJL sketches, a non-power-of-two rotation); unrotate(decoded values)
    // equals DEQUANT of a value row.
    const int d = 64;
    std::vector<int> perm(d);
    std::iota(perm.begin(), perm.end(), 0);
    std::reverse(perm.begin(), perm.begin() + 40);
    const std::vector<std::vector<TurboPartSpec>> layouts = {
        {{d, 3, 0}}, {{16, 4, 0}, {48, 2, 0}}, {{24, 2, 24}, {40, 1, 40}}, {{8, 0, 40}, {56, 0, 96}}, {{d, 1, 64}}};
    const std::vector<float> x = test::gaussian(std::size_t(d) * 6, 8, 2.0f), q = test::gaussian(std::size_t(d) * 6, 9);
    for (const auto& parts : layouts) {
        const TurboStreamCoder c(d, parts, 3);
        std::vector<std::uint8_t> row(c.row_bytes().total());
        std::vector<float> ke(c.ext_dim()), qe(c.ext_dim()), xd(d);
        for (int t = 0; t < 6; ++t) {
            c.encode(x.data() + t * d, perm.data(), row.data());
            c.decode_ext(row.data(), 1, ke.data());
            c.prepare_query(q.data() + t * d, perm.data(), qe.data());
            c.decode(row.data(), 1, perm.data(), xd.data());
            const double want = dot(q.data() + t * d, xd.data(), d);
            EXPECT_NEAR(dot(qe.data(), ke.data(), c.ext_dim()), want, 1e-4 * (1 + std::fabs(want))) << parts.size();
            if (c.rotated_only()) {
                std::vector<float> back(d);
                c.unrotate(ke.data(), perm.data(), back.data());
                for (int i = 0; i < d; ++i) EXPECT_NEAR(back[i], xd[i], 1e-5) << i;
            }
        }
    }
}

TEST(TurboCodec, QjlEstimatorIsUnbiasedAndTurboMseIsNot) {
    // Over independent draws of the projection S (one seed each), the mean of the QJL estimate of
    // <q, k> converges to <q, k> (the papers' unbiasedness), with variance within the paper's
    // π / (2m) ‖q‖² ‖k‖²; TurboQuant_prod (1 mse bit + the residual's sketch) is unbiased too, while
    // TurboQuant_mse at 1 bit shrinks inner products by 2/π, which this test must see.
    const int d = 32, m = 32, n_draws = 6000;
    std::vector<float> k = test::gaussian(d, 21), q(d);
    const double kn = std::sqrt(dot(k.data(), k.data(), d));
    for (float& v : k) v = float(v / kn);
    std::vector<float> u = test::gaussian(d, 22);  // q = 0.6 k + 0.8 u⊥: ‖q‖ = 1, <q, k> = 0.6
    const double uk = dot(u.data(), k.data(), d);
    for (int i = 0; i < d; ++i) u[i] = float(u[i] - uk * k[i]);
    const double un = std::sqrt(dot(u.data(), u.data(), d));
    for (int i = 0; i < d; ++i) q[i] = float(0.6 * k[i] + 0.8 * u[i] / un);
    const double truth = dot(q.data(), k.data(), d);
    struct Case {
        TurboPartSpec part;
        bool unbiased;
    };
    for (const Case& c : {Case{{d, 0, m}, true}, Case{{d, 1, d}, true}, Case{{d, 1, 0}, false}}) {
        double sum = 0, sum2 = 0;
        for (int s = 0; s < n_draws; ++s) {
            const double e = estimate(TurboStreamCoder(d, {c.part}, 1000 + s), q, k);
            sum += e;
            sum2 += e * e;
        }
        const double mean = sum / n_draws, var = sum2 / n_draws - mean * mean;
        const double sigma_mean = std::sqrt(var / n_draws);
        SCOPED_TRACE(testing::Message() << "mse bits " << c.part.mse_bits << " sketch " << c.part.sketch_bits
                                        << " mean " << mean << " sd " << std::sqrt(var));
        if (c.unbiased) {
            EXPECT_LT(std::fabs(mean - truth), 4 * sigma_mean + 5e-4);  // 5e-4: the f16 norms
            EXPECT_LT(4 * sigma_mean, 0.015);  // tight enough to see a 2.5% bias
        } else {
            EXPECT_GT(std::fabs(mean - truth), 0.1);  // E = (2/π) <q, k> up to the rotation's spread
        }
        if (c.part.mse_bits == 0) {
            EXPECT_LT(var, 1.15 * M_PI / (2 * m));
        }
    }
}

