#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/pq.h"
#include "pq/pq_test_data.h"
#include "pq/rotation.h"
#include "pq/subspace_plan.h"

namespace aqpim {
namespace {

using test::correlated;
using test::dot;
using test::gaussian;
using test::sq_dist;

PQParams params(int D, int M, int nbits = 4) {
    PQParams p;
    p.D = D;
    p.M = M;
    p.nbits = nbits;
    p.kmeans.max_iter = 15;
    return p;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// Mean squared reconstruction error of decode(encode(x)), x [n][D].
double reconstruction_mse(const ProductQuantizer& pq, const std::vector<float>& x) {
    const std::int64_t n = std::int64_t(x.size()) / pq.D();
    std::vector<std::uint8_t> codes(std::size_t(n) * pq.M());
    std::vector<float> xr(x.size());
    pq.encode(x.data(), n, codes.data());
    pq.decode(codes.data(), n, xr.data());
    return sq_dist(x.data(), xr.data(), int(x.size())) / double(x.size());
}

// ---- parameters ---------------------------------------------------------------------------------

TEST(ProductQuantizer, BadParametersThrow) {
    EXPECT_NE(error_of([] { ProductQuantizer(params(130, 32)); }).find("D=130 is not divisible by M=32"),
              std::string::npos);
    EXPECT_NE(error_of([] { ProductQuantizer(params(128, 32, 3)); }).find("nbits=3: expected 4 or 8"),
              std::string::npos);
    PQParams h = params(96, 32);
    h.rotation = Rotation::hadamard;
    EXPECT_NE(error_of([&] { ProductQuantizer pq(h); }).find("power of two"), std::string::npos);
    PQParams odd = params(96, 32);  // dsub 3
    odd.pairs = RopePairs::interleaved;
    EXPECT_THROW(ProductQuantizer pq(odd), Error);
    odd.pairs = RopePairs::neox;
    EXPECT_THROW(ProductQuantizer pq(odd), Error);
    PQParams km = params(16, 4);
    km.kmeans.max_iter = -1;
    EXPECT_THROW(ProductQuantizer pq(km), Error);
    km = params(16, 4);
    km.kmeans.tol = NAN;
    EXPECT_THROW(ProductQuantizer pq(km), Error);
    EXPECT_THROW(ProductQuantizer pq(params(0, 1)), Error);
    EXPECT_THROW(ProductQuantizer pq(params(16, 0)), Error);
}

TEST(ProductQuantizer, BadTrainingInputThrows) {
    ProductQuantizer pq(params(16, 4));
    auto x = gaussian(64, 16, 1);
    EXPECT_NE(error_of([&] { pq.train(x.data(), 0); }).find("empty training set"), std::string::npos);
    x[5 * 16 + 3] = NAN;
    EXPECT_NE(error_of([&] { pq.train(x.data(), 64); }).find("not finite"), std::string::npos);
    x[5 * 16 + 3] = 0;
    std::vector<float> w(64, 0.0f);
    EXPECT_THROW(pq.train(x.data(), 64, w.data()), Error);  // all zero
    w[3] = -1;
    EXPECT_THROW(pq.train(x.data(), 64, w.data()), Error);
    EXPECT_FALSE(pq.is_trained());
    std::vector<std::uint8_t> codes(4);
    EXPECT_THROW(pq.encode(x.data(), 1, codes.data()), Error);  // untrained
}

// ---- transforms ---------------------------------------------------------------------------------

// Every combination of pairs x order x rotation x scale folding: inverse(forward(x)) == x,
// transform_query(q) · forward(x) == q · x, RoPE pairs stay in one subspace, and in-place calls agree.
TEST(ProductQuantizer, TransformIdentitiesForEveryCombination) {
    const int D = 16, M = 4, n = 48;
    std::vector<float> cs(D);
    for (int d = 0; d < D; ++d) cs[d] = 0.2f + float(d % 5) + (d == 6 ? 20.0f : 0.0f);
    auto x = gaussian(n, D, 2, cs), q = gaussian(n, D, 3);
    for (RopePairs pairs : {RopePairs::none, RopePairs::interleaved, RopePairs::neox})
        for (SubspaceOrder order : {SubspaceOrder::contiguous, SubspaceOrder::variance_balanced})
            for (Rotation rot : {Rotation::none, Rotation::hadamard, Rotation::random_orthogonal})
                for (bool fold : {false, true}) {
                    SCOPED_TRACE(testing::Message() << "pairs " << int(pairs) << " order " << int(order) << " rotation "
                                                    << int(rot) << " fold " << fold);
                    PQParams p = params(D, M);
                    p.pairs = pairs;
                    p.order = order;
                    p.rotation = rot;
                    p.scale_folding = fold;
                    p.kmeans.max_iter = 2;
                    ProductQuantizer pq(p);
                    pq.train(x.data(), n);
                    EXPECT_TRUE(is_permutation(pq.permutation()));
                    EXPECT_TRUE(plan_keeps_pairs(pq.permutation(), M, pairs));
                    EXPECT_EQ(pq.is_identity_transform(),
                              !fold && rot == Rotation::none && is_identity_permutation(pq.permutation()));
                    std::vector<float> y(x.size()), back(x.size()), qy(q.size()), inplace = x;
                    pq.forward(x.data(), y.data(), n);
                    pq.inverse(y.data(), back.data(), n);
                    pq.transform_query(q.data(), qy.data(), n);
                    pq.forward(inplace.data(), inplace.data(), n);
                    EXPECT_EQ(inplace, y);
                    for (int i = 0; i < n; ++i) {
                        const float* xi = x.data() + i * D;
                        double scale = std::sqrt(dot(xi, xi, D));
                        for (int d = 0; d < D; ++d) ASSERT_NEAR(back[i * D + d], xi[d], 1e-5 * scale);
                        double want = dot(q.data() + i * D, xi, D);
                        double got = dot(qy.data() + i * D, y.data() + i * D, D);
                        ASSERT_NEAR(got, want, 1e-5 * scale * std::sqrt(dot(q.data() + i * D, q.data() + i * D, D)));
                    }
                }
}

TEST(ProductQuantizer, RotationsAreOrthogonalInPractice) {
    const int D = 32, n = 40;
    auto x = gaussian(n, D, 4);
    for (Rotation rot : {Rotation::hadamard, Rotation::random_orthogonal}) {
        PQParams p = params(D, 8);
        p.rotation = rot;
        ProductQuantizer pq(p);
        pq.train(x.data(), n);
        std::vector<float> y(x.size());
        pq.forward(x.data(), y.data(), n);  // no scale: norms and dot products are kept
        for (int i = 0; i < n; ++i)
            EXPECT_NEAR(dot(y.data() + i * D, y.data() + i * D, D), dot(x.data() + i * D, x.data() + i * D, D), 1e-4 * D);
        if (rot == Rotation::hadamard) {  // identity plan: y = H · diag(signs) · x / sqrt(D) exactly as specified
            ASSERT_TRUE(is_identity_permutation(pq.permutation()));
            std::vector<float> ref(x.begin(), x.begin() + D);
            hadamard_rotate(pq.hadamard_signs().data(), D, ref.data(), false);
            for (int d = 0; d < D; ++d) EXPECT_NEAR(y[d], ref[d], 1e-5);
        }
        if (rot == Rotation::random_orthogonal) {
            const auto& R = pq.rotation_matrix();
            ASSERT_EQ(R.size(), std::size_t(D) * D);
            for (int a = 0; a < D; ++a)
                for (int b = 0; b < D; ++b) {
                    double s = 0;
                    for (int r = 0; r < D; ++r) s += double(R[r * D + a]) * R[r * D + b];
                    ASSERT_NEAR(s, a == b ? 1.0 : 0.0, 1e-5);
                }
        }
    }
}

// ---- codes --------------------------------------------------------------------------------------

TEST(ProductQuantizer, EncodePicksTheNearestCentroid) {
    const int D = 32, M = 8, n = 300;
    auto x = correlated(n, D, 5);
    PQParams p = params(D, M);
    p.rotation = Rotation::hadamard;
    p.scale_folding = true;
    p.order = SubspaceOrder::variance_balanced;
    ProductQuantizer pq(p);
    pq.train(x.data(), n);
    const int ds = pq.dsub(), K = pq.ksub();
    auto xt = correlated(200, D, 6);
    std::vector<std::uint8_t> codes(200 * M);
    std::vector<float> y(xt.size()), xr(xt.size()), yr(xt.size());
    pq.encode(xt.data(), 200, codes.data());
    pq.forward(xt.data(), y.data(), 200);
    pq.decode(codes.data(), 200, xr.data());
    pq.forward(xr.data(), yr.data(), 200);
    for (int i = 0; i < 200; ++i)
        for (int m = 0; m < M; ++m) {
            const float* yi = y.data() + i * D + m * ds;
            const int c = codes[i * M + m];
            ASSERT_LT(c, K);
            const float* cent = pq.centroids() + (m * K + c) * ds;
            double best = sq_dist(yi, cent, ds);
            for (int j = 0; j < K; ++j) ASSERT_LE(best, sq_dist(yi, pq.centroids() + (m * K + j) * ds, ds) + 1e-5);
            for (int j = 0; j < ds; ++j) ASSERT_NEAR(yr[i * D + m * ds + j], cent[j], 1e-4);  // decode = centroids
        }
}

TEST(ProductQuantizer, CentroidsCanBeReleasedAndReplaced) {
    // The KV cache's cb=f16 keeps codebooks as f16 and hands them back widened: the transforms stay,
    // encode/decode refuse without codebooks, and the replaced ones are used (norms recomputed).
    const int D = 32, M = 8, n = 300;
    auto x = correlated(n, D, 9);
    PQParams p = params(D, M);
    p.scale_folding = true;
    p.order = SubspaceOrder::variance_balanced;
    ProductQuantizer pq(p);
    pq.train(x.data(), n);
    const std::size_t nc = std::size_t(pq.ksub()) * D;
    std::vector<float> moved(pq.centroids(), pq.centroids() + nc);
    for (float& c : moved) c += 0.25f;
    const std::size_t bytes = pq.parameter_bytes();
    ProductQuantizer shell = pq;
    shell.release_centroids();
    EXPECT_FALSE(shell.has_centroids());
    EXPECT_EQ(shell.parameter_bytes(), bytes);
    std::vector<std::uint8_t> codes(std::size_t(n) * M);
    std::vector<float> xr(x.size());
    EXPECT_THROW(shell.encode(x.data(), n, codes.data()), Error);
    EXPECT_THROW(shell.decode(codes.data(), 1, xr.data()), Error);
    moved[5] = NAN;
    EXPECT_THROW(shell.set_centroids(moved.data()), Error);
    moved[5] = pq.centroids()[5] + 0.25f;
    shell.set_centroids(moved.data());
    ASSERT_TRUE(shell.has_centroids());
    for (std::size_t i = 0; i < nc; ++i) ASSERT_EQ(shell.centroids()[i], moved[i]);
    const int K = pq.ksub(), ds = pq.dsub();
    for (int c = 0; c < M * K; ++c) {
        float norm = 0;
        for (int j = 0; j < ds; ++j) norm += moved[c * ds + j] * moved[c * ds + j];
        ASSERT_NEAR(shell.centroid_norms()[c], norm, 1e-4f * std::max(1.0f, norm));
    }
    // Decoding code 0 everywhere gives the moved centroids through the kept transform.
    std::vector<std::uint8_t> zero(M, 0);
    std::vector<float> a(D), b(D), ya(D), yb(D);
    shell.decode(zero.data(), 1, a.data());
    pq.decode(zero.data(), 1, b.data());
    shell.forward(a.data(), ya.data(), 1);
    pq.forward(b.data(), yb.data(), 1);
    for (int m = 0; m < M; ++m)
        for (int j = 0; j < ds; ++j) EXPECT_NEAR(ya[m * ds + j] - yb[m * ds + j], 0.25f, 1e-4f);
}

TEST(ProductQuantizer, ACentroidEncodesToItsCode) {
    const int D = 32, M = 8, n = 400;
    auto x = correlated(n, D, 7);
    for (Rotation rot : {Rotation::none, Rotation::random_orthogonal}) {
        PQParams p = params(D, M);
        p.rotation = rot;
        p.scale_folding = rot != Rotation::none;
        ProductQuantizer pq(p);
        pq.train(x.data(), n);
        const int K = pq.ksub(), ds = pq.dsub();
        std::vector<std::uint8_t> codes(K * M), back(K * M);
        for (int t = 0; t < K; ++t)
            for (int m = 0; m < M; ++m) codes[t * M + m] = std::uint8_t((t * 7 + m * 3) % K);
        std::vector<float> xr(std::size_t(K) * D);
        pq.decode(codes.data(), K, xr.data());
        pq.encode(xr.data(), K, back.data());
        for (int t = 0; t < K * M; ++t) {
            if (back[t] == codes[t]) continue;  // else only an exact duplicate centroid may win
            const int m = t % M;
            EXPECT_EQ(sq_dist(pq.centroids() + (m * K + back[t]) * ds, pq.centroids() + (m * K + codes[t]) * ds, ds), 0.0)
                << "token " << t / M << " subspace " << m;
        }
    }
}

TEST(ProductQuantizer, ErrorFallsWithMoreSubspacesAndBits) {
    const int D = 32, n = 1024;
    auto x = correlated(n, D, 8), xt = correlated(512, D, 9);
    double prev = 1e30;
    for (int M : {4, 8, 16}) {
        ProductQuantizer pq(params(D, M));
        pq.train(x.data(), n);
        double mse = reconstruction_mse(pq, xt);
        EXPECT_LT(mse, prev * 0.9) << "M=" << M;
        prev = mse;
    }
    ProductQuantizer pq4(params(D, 8, 4)), pq8(params(D, 8, 8));
    pq4.train(x.data(), n);
    pq8.train(x.data(), n);
    EXPECT_LT(reconstruction_mse(pq8, xt), 0.7 * reconstruction_mse(pq4, xt));
}

TEST(ProductQuantizer, DecodeRejectsOutOfRangeCodes) {
    auto x = gaussian(64, 16, 10);
    ProductQuantizer pq(params(16, 4));
    pq.train(x.data(), 64);
    std::vector<std::uint8_t> codes = {0, 1, 16, 2};
    std::vector<float> out(16);
    EXPECT_THROW(pq.decode(codes.data(), 1, out.data()), Error);
}

// Keys with a few outlier channels, queries small on them (per channel std 1/key std, the case
// folding targets): scale folding lowers the score error |q·x - q·x̂| relative to |q·x|.
TEST(ProductQuantizer, ScaleFoldingHelpsOnOutlierChannels) {
    const int D = 32, M = 8, n = 1024;
    std::vector<float> ks(D, 1.0f), qs(D);
    for (int d : {1, 6, 9, 14, 21, 26}) ks[d] = 30.0f;  // outliers in 6 of the 8 subspaces
    for (int d = 0; d < D; ++d) qs[d] = 1.0f / ks[d];
    auto x = gaussian(n, D, 11, ks), xt = gaussian(256, D, 12, ks), q = gaussian(256, D, 13, qs);
    double err[2];
    for (bool fold : {false, true}) {
        PQParams p = params(D, M);
        p.scale_folding = fold;
        ProductQuantizer pq(p);
        pq.train(x.data(), n);
        std::vector<std::uint8_t> codes(256 * M);
        std::vector<float> xr(xt.size());
        pq.encode(xt.data(), 256, codes.data());
        pq.decode(codes.data(), 256, xr.data());
        double e = 0, ref = 0;
        for (int i = 0; i < 256; ++i)
            for (int j = 0; j < 256; j += 17) {
                double s = dot(q.data() + i * D, xt.data() + j * D, D);
                double sr = dot(q.data() + i * D, xr.data() + j * D, D);
                e += (s - sr) * (s - sr);
                ref += s * s;
            }
        err[fold] = e / ref;
    }
    EXPECT_LT(err[1], 0.7 * err[0]) << "without folding " << err[0] << ", with " << err[1];
}

TEST(ProductQuantizer, VarianceBalancedSpreadsVariance) {
    const int D = 32, M = 4, n = 512;  // four hot channels, one per subspace when balanced
    std::vector<float> cs(D, 1.0f);
    cs[0] = cs[1] = cs[2] = cs[3] = 8.0f;
    auto x = gaussian(n, D, 14, cs);
    double ratio[2];
    for (SubspaceOrder order : {SubspaceOrder::contiguous, SubspaceOrder::variance_balanced}) {
        PQParams p = params(D, M);
        p.order = order;
        p.kmeans.max_iter = 1;
        ProductQuantizer pq(p);
        pq.train(x.data(), n);
        std::vector<float> y(x.size());
        pq.forward(x.data(), y.data(), n);
        std::vector<double> sub(M, 0.0);
        for (int i = 0; i < n; ++i)
            for (int d = 0; d < D; ++d) sub[d / pq.dsub()] += double(y[i * D + d]) * y[i * D + d];
        ratio[int(order)] = *std::max_element(sub.begin(), sub.end()) / *std::min_element(sub.begin(), sub.end());
    }
    EXPECT_GT(ratio[0], 20.0);
    EXPECT_LT(ratio[1], 3.0);
}

TEST(ProductQuantizer, DeterministicForASeed) {
    const int D = 32, n = 256;
    auto x = correlated(n, D, 15);
    PQParams p = params(D, 8);
    p.rotation = Rotation::random_orthogonal;
    p.order = SubspaceOrder::variance_balanced;
    ProductQuantizer a(p), b(p);
    a.train(x.data(), n);
    b.train(x.data(), n);
    ASSERT_EQ(a.permutation(), b.permutation());
    ASSERT_EQ(a.rotation_matrix(), b.rotation_matrix());
    EXPECT_TRUE(std::equal(a.centroids(), a.centroids() + 8 * 16 * 4, b.centroids()));
    p.seed = 4321;
    ProductQuantizer c(p);
    c.train(x.data(), n);
    EXPECT_NE(a.rotation_matrix(), c.rotation_matrix());
}

TEST(ProductQuantizer, ParameterBytesCountsEverything) {
    const int D = 32, M = 8, n = 64;
    auto x = gaussian(n, D, 16);
    PQParams p = params(D, M);
    ProductQuantizer plain(p);
    plain.train(x.data(), n);
    EXPECT_EQ(plain.parameter_bytes(), std::size_t(M) * 16 * 4 * 4);  // centroids only
    p.scale_folding = true;
    p.rotation = Rotation::random_orthogonal;
    p.order = SubspaceOrder::variance_balanced;
    ProductQuantizer full(p);
    full.train(x.data(), n);
    const std::size_t perm = is_identity_permutation(full.permutation()) ? 0 : D * 4;
    EXPECT_EQ(full.parameter_bytes(), std::size_t(M) * 16 * 4 * 4 + D * 4 + perm + D * D * 4);
}

// ---- batched training ---------------------------------------------------------------------------

TEST(ProductQuantizer, BatchedTrainingMatchesSeparateTraining) {
    const int D = 32, M = 8, n = 256, n_pq = 4;
    std::vector<std::vector<float>> data;
    std::vector<const float*> xs;
    std::vector<ProductQuantizer> batched, separate;
    for (int i = 0; i < n_pq; ++i) {
        data.push_back(correlated(n, D, 20 + i, 30 + i));
        PQParams p = params(D, M);
        p.rotation = i % 2 ? Rotation::hadamard : Rotation::random_orthogonal;
        p.scale_folding = i != 2;
        p.order = i % 3 ? SubspaceOrder::variance_balanced : SubspaceOrder::contiguous;
        p.pairs = i == 3 ? RopePairs::neox : RopePairs::none;
        p.seed = 100 + i % 2;  // two quantizers share each rotation seed
        batched.emplace_back(p);
        separate.emplace_back(p);
    }
    for (auto& d : data) xs.push_back(d.data());
    KMeansStats stats = train_product_quantizers(batched, xs, n);
    ASSERT_EQ(stats.sse.size(), std::size_t(n_pq) * M);
    for (int i = 0; i < n_pq; ++i) {
        separate[i].train(data[i].data(), n);
        ASSERT_TRUE(batched[i].is_trained());
        EXPECT_EQ(batched[i].permutation(), separate[i].permutation()) << i;
        EXPECT_EQ(batched[i].scale(), separate[i].scale()) << i;
        EXPECT_EQ(batched[i].rotation_matrix(), separate[i].rotation_matrix()) << i;
        EXPECT_EQ(batched[i].hadamard_signs(), separate[i].hadamard_signs()) << i;
        const std::size_t n_c = std::size_t(M) * 16 * 4;
        bool same = std::equal(batched[i].centroids(), batched[i].centroids() + n_c, separate[i].centroids());
        if (i == 0) {
            EXPECT_TRUE(same) << "quantizer 0 is problems 0..M-1 in both calls";
        }
        // other quantizers: other k-means seeds (problem indices), same quality
        double mb = reconstruction_mse(batched[i], data[i]), ms = reconstruction_mse(separate[i], data[i]);
        EXPECT_NEAR(mb, ms, 0.15 * ms) << i;
    }
    // one quantizer: bit-identical to train()
    ProductQuantizer one(batched[1].params());
    const float* x1 = data[1].data();
    train_product_quantizers(std::span<ProductQuantizer>(&one, 1), std::span<const float* const>(&x1, 1), n);
    EXPECT_TRUE(std::equal(one.centroids(), one.centroids() + M * 16 * 4, separate[1].centroids()));
}

TEST(ProductQuantizer, BatchedTrainingIndependentOfThreadCount) {
    const int D = 16, M = 4, n = 128, n_pq = 5;
    std::vector<std::vector<float>> data;
    std::vector<const float*> xs;
    for (int i = 0; i < n_pq; ++i) data.push_back(correlated(n, D, 50 + i, 60 + i));
    for (auto& d : data) xs.push_back(d.data());
    std::vector<std::vector<ProductQuantizer>> runs;
    for (int threads : {1, 3}) {
        std::vector<ProductQuantizer> pqs;
        for (int i = 0; i < n_pq; ++i) {
            PQParams p = params(D, M);
            p.kmeans.n_threads = threads;
            p.rotation = i % 2 ? Rotation::random_orthogonal : Rotation::hadamard;
            p.scale_folding = true;
            p.order = SubspaceOrder::variance_balanced;
            p.seed = 7 + i;
            pqs.emplace_back(p);
        }
        train_product_quantizers(pqs, xs, n);
        runs.push_back(std::move(pqs));
    }
    for (int i = 0; i < n_pq; ++i) {
        EXPECT_EQ(runs[0][i].permutation(), runs[1][i].permutation()) << i;
        EXPECT_TRUE(std::equal(runs[0][i].centroids(), runs[0][i].centroids() + M * 16 * 4, runs[1][i].centroids())) << i;
    }
}

TEST(ProductQuantizer, BatchedTrainingRejectsMismatches) {
    auto x = gaussian(64, 16, 40);
    std::vector<const float*> xs = {x.data(), x.data()};
    std::vector<ProductQuantizer> pqs = {ProductQuantizer(params(16, 4)), ProductQuantizer(params(16, 8))};
    EXPECT_THROW(train_product_quantizers(pqs, xs, 64), Error);  // M differs
    PQParams other = params(16, 4);
    other.kmeans.seed = 9;
    pqs = {ProductQuantizer(params(16, 4)), ProductQuantizer(other)};
    EXPECT_THROW(train_product_quantizers(pqs, xs, 64), Error);  // k-means options differ
    pqs = {ProductQuantizer(params(16, 4)), ProductQuantizer(params(16, 4))};
    EXPECT_THROW(train_product_quantizers(pqs, std::span<const float* const>(xs.data(), 1), 64), Error);
    EXPECT_THROW(train_product_quantizers(pqs, xs, 0), Error);
    EXPECT_NO_THROW(train_product_quantizers(pqs, xs, 64));
}

}  // namespace
}  // namespace aqpim
