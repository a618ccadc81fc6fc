// Attention on PQ codes equals attention over the decoded vectors (decode-then-dense), for both
// value paths, every SIMD level, and several quantizer configurations.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "aqpim/attention.h"
#include "aqpim/error.h"
#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "aqpim/workspace.h"
#include "support/random.h"
#include "support/simd_guard.h"

namespace aqpim {
namespace {

struct Case {
    int D, M, nbits, n_q;
    std::int64_t n;
    Rotation rotation;
    bool scale_folding;
    RopePairs pairs;
};

struct Coded {
    ProductQuantizer pq;
    std::vector<std::uint8_t> blocks;
    std::vector<float> decoded;  // [n][D]
};

Coded code(const std::vector<float>& x, std::int64_t n, const Case& c, std::uint64_t seed) {
    PQParams p;
    p.D = c.D;
    p.M = c.M;
    p.nbits = c.nbits;
    p.rotation = c.rotation;
    p.scale_folding = c.scale_folding;
    p.pairs = c.pairs;
    p.seed = seed;
    p.kmeans.max_iter = 8;
    Coded out{ProductQuantizer(p), {}, {}};
    out.pq.train(x.data(), std::min<std::int64_t>(n, 256));
    std::vector<std::uint8_t> codes(std::size_t(n) * c.M);
    out.pq.encode(x.data(), n, codes.data());
    out.blocks.resize(std::size_t(code_blocks_for(n)) * code_block_bytes(c.M, c.nbits));
    pack_code_blocks(codes.data(), n, c.M, c.nbits, out.blocks.data());
    out.decoded.resize(std::size_t(n) * c.D);
    out.pq.decode(codes.data(), n, out.decoded.data());
    return out;
}


TEST(PqAttention, EqualsDecodeThenDense) {
    const Case cases[] = {
        {128, 32, 4, 4, 1000, Rotation::none, false, RopePairs::none},
        {128, 16, 8, 2, 333, Rotation::none, true, RopePairs::interleaved},
        {64, 16, 4, 3, 257, Rotation::hadamard, true, RopePairs::none},
        {48, 12, 4, 5, 100, Rotation::random_orthogonal, false, RopePairs::neox},
        {32, 32, 4, 1, 31, Rotation::none, false, RopePairs::none},
        {16, 8, 4, 9, 64, Rotation::none, true, RopePairs::none},
        // 8-bit keys: per-head gathers (n_q = 1) and tables by four heads (a partial group; two
        // groups over several tiles)
        {32, 8, 8, 1, 300, Rotation::none, false, RopePairs::none},
        {64, 16, 8, 5, 2100, Rotation::none, false, RopePairs::none},
        // 4-bit over three tiles (the pair histograms rescaled as the running max grows), a partial head group
        {64, 16, 4, 6, 2500, Rotation::none, false, RopePairs::none},
        {32, 8, 8, 8, 400, Rotation::hadamard, true, RopePairs::none},
    };
    for (const Case& c : cases) {
        auto K = test::gaussian(std::size_t(c.n) * c.D, 1), V = test::gaussian(std::size_t(c.n) * c.D, 2);
        auto q = test::gaussian(std::size_t(c.n_q) * c.D, 3);
        Coded ck = code(K, c.n, c, 10), cv = code(V, c.n, c, 20);
        const float scale = 1.0f / std::sqrt(float(c.D));
        AttentionPartial dense(c.n_q, c.D);
        attend_dense_f32(q.data(), c.n_q, c.D, ck.decoded.data(), cv.decoded.data(), c.n, scale, dense);
        std::vector<float> expect(std::size_t(c.n_q) * c.D), got(expect.size());
        dense.finalize(expect.data());
        for (SimdLevel level : supported_simd_levels()) {
            test::SimdLevelGuard guard(level);
            for (PqValuePath path :
                 {PqValuePath::histogram, PqValuePath::permute, PqValuePath::pairs, PqValuePath::automatic}) {
                if ((path == PqValuePath::permute || path == PqValuePath::pairs) && c.nbits != 4) continue;
                PqAttentionOptions o;
                o.values = path;
                AttentionPartial part(c.n_q, c.D);
                attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, scale, o, part);
                part.finalize(got.data());
                for (std::size_t i = 0; i < got.size(); ++i)
                    ASSERT_NEAR(got[i], expect[i], 2e-4f * (1 + std::fabs(expect[i])))
                        << simd_level_name(level) << " D=" << c.D << " M=" << c.M << " nbits=" << c.nbits
                        << " n_q=" << c.n_q << " path=" << int(path) << " i=" << i;
            }
        }
    }
}

TEST(PqAttention, AWorkspaceGivesTheSameBitsAndIsReusedWarm) {
    // Each value path and both key widths: a call with the caller's workspace equals one without
    // (its own, freed on return) bit for bit; once warm, the workspace does not grow.
    const Case cases[] = {{128, 32, 4, 4, 2500, Rotation::none, false, RopePairs::none},
                          {64, 16, 8, 5, 2100, Rotation::none, false, RopePairs::none}};
    for (const Case& c : cases) {
        auto K = test::gaussian(std::size_t(c.n) * c.D, 4), V = test::gaussian(std::size_t(c.n) * c.D, 5);
        auto q = test::gaussian(std::size_t(c.n_q) * c.D, 6);
        Coded ck = code(K, c.n, c, 11), cv = code(V, c.n, c, 21);
        for (PqValuePath path : {PqValuePath::histogram, PqValuePath::permute, PqValuePath::pairs}) {
            if (path != PqValuePath::histogram && c.nbits != 4) continue;
            for (PqScorePath scores : {PqScorePath::f32, PqScorePath::automatic}) {
                PqAttentionOptions o;
                o.values = path;
                o.scores = scores;
                AttentionPartial own(c.n_q, c.D), given(c.n_q, c.D);
                attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.1f, o, own);
                Workspace ws;
                attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.1f, o, given, &ws);
                EXPECT_EQ(own.acc, given.acc);
                EXPECT_EQ(own.sum, given.sum);
                const std::size_t warm = ws.bytes();
                EXPECT_GT(warm, std::size_t(c.n_q) * c.D * sizeof(float));  // at least the accumulators
                AttentionPartial again(c.n_q, c.D);
                attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.1f, o, again, &ws);
                EXPECT_EQ(again.acc, own.acc);
                EXPECT_EQ(ws.bytes(), warm) << "path " << to_string(path);
            }
        }
    }
}

TEST(PqAttention, Int8ScoresStayCloseToExact) {
  // 4-bit keys (vpermb) and 8-bit (vpermi2b at the avx512 level, the reference elsewhere)
  for (const Case& c : {Case{128, 32, 4, 4, 2000, Rotation::none, false, RopePairs::none},
                        Case{128, 16, 8, 4, 2000, Rotation::none, false, RopePairs::none}}) {
    auto K = test::gaussian(std::size_t(c.n) * c.D, 4), V = test::gaussian(std::size_t(c.n) * c.D, 5);
    auto q = test::gaussian(std::size_t(c.n_q) * c.D, 6);
    Coded ck = code(K, c.n, c, 30), cv = code(V, c.n, c, 40);
    const float scale = 1.0f / std::sqrt(float(c.D));
    std::vector<float> exact(c.n_q * c.D), approx(exact.size());
    AttentionPartial a(c.n_q, c.D), b(c.n_q, c.D);
    attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, scale, {}, a);
    PqAttentionOptions o;
    o.scores = PqScorePath::int8;
    attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, scale, o, b);
    a.finalize(exact.data());
    b.finalize(approx.data());
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
        err += (exact[i] - approx[i]) * (exact[i] - approx[i]);
        norm += exact[i] * exact[i];
    }
    EXPECT_LT(std::sqrt(err / norm), 0.05) << "int8 tables moved the attention output by more than 5%, nbits " << c.nbits;
    EXPECT_GT(std::sqrt(err / norm), 0.0) << "int8 path should not be bit-identical to exact tables, nbits " << c.nbits;
  }
}

TEST(PqAttention, Bf16ValuesStayCloseToExactOverTiles) {
    // Three tiles (the accumulators rescaled as the running max grows), a partial head group.
    const Case c{128, 32, 4, 6, 2500, Rotation::none, false, RopePairs::none};
    auto K = test::gaussian(std::size_t(c.n) * c.D, 11), V = test::gaussian(std::size_t(c.n) * c.D, 12);
    auto q = test::gaussian(std::size_t(c.n_q) * c.D, 13);
    Coded ck = code(K, c.n, c, 70), cv = code(V, c.n, c, 80);
    PqAttentionOptions exact_opts, bf16_opts;
    exact_opts.values = PqValuePath::permute;
    bf16_opts.values = PqValuePath::bf16;
    for (SimdLevel level : supported_simd_levels()) {
        test::SimdLevelGuard guard(level);
        AttentionPartial a(c.n_q, c.D), b(c.n_q, c.D);
        if (level != SimdLevel::avx512 || !cpu_has_avx512_bf16()) {
            EXPECT_THROW(attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.1f, bf16_opts, b),
                         Error)
                << simd_level_name(level) << ": values=bf16 where the CPU or level lacks AVX512-BF16";
            continue;
        }
        attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.1f, exact_opts, a);
        attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.1f, bf16_opts, b);
        std::vector<float> exact(std::size_t(c.n_q) * c.D), approx(exact.size());
        a.finalize(exact.data());
        b.finalize(approx.data());
        double err = 0, v_square = 0;
        for (std::size_t i = 0; i < exact.size(); ++i) err += (exact[i] - approx[i]) * (exact[i] - approx[i]);
        for (float v : cv.decoded) v_square += double(v) * v;
        // bf16 keeps 8 significant bits: each weight and centroid within 2^-9 of itself, so the output
        // (a weighted mean of centroids) moves by at most 2^-8 of the values' scale. The error is that
        // of the centroids, shared by every token with the code, so it does not average out; against the
        // output itself (a mean of zero-mean values here, 25x smaller) it is about 1%.
        const double rms = std::sqrt(err / double(exact.size())), v_rms = std::sqrt(v_square / double(cv.decoded.size()));
        EXPECT_LT(rms, v_rms / 256) << "bf16 values moved the attention output by more than 2^-8 of the values' scale";
        EXPECT_GT(err, 0.0) << "the bf16 pass should round (not be the exact pass)";
        // automatic takes bf16 beside int8 score tables, and the exact pass beside f32 ones.
        EXPECT_EQ(resolve_value_path(PqValuePath::automatic, 4, c.n, true), PqValuePath::bf16);
        EXPECT_EQ(resolve_value_path(PqValuePath::automatic, 4, c.n, false), PqValuePath::permute);
    }
}

TEST(PqAttention, GivenValueColumnsGiveTheSameBits) {
    // A caller attending many rows builds codebook_columns once (PqAttentionOptions::v_columns):
    // the permute path then reads those instead of building its own, with the same result.
    const Case c{64, 16, 4, 4, 700, Rotation::none, false, RopePairs::none};
    auto K = test::gaussian(std::size_t(c.n) * c.D, 8), V = test::gaussian(std::size_t(c.n) * c.D, 9);
    auto q = test::gaussian(std::size_t(c.n_q) * c.D, 10);
    Coded ck = code(K, c.n, c, 50), cv = code(V, c.n, c, 60);
    std::vector<float> columns(std::size_t(c.M) * cv.pq.dsub() * 16);
    codebook_columns(cv.pq.centroids(), c.M, cv.pq.dsub(), columns.data());
    for (SimdLevel level : supported_simd_levels()) {
        test::SimdLevelGuard guard(level);
        PqAttentionOptions o;
        o.values = PqValuePath::permute;
        AttentionPartial a(c.n_q, c.D), b(c.n_q, c.D);
        attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.125f, o, a);
        o.v_columns = columns.data();
        attend_pq(q.data(), c.n_q, ck.pq, cv.pq, ck.blocks.data(), cv.blocks.data(), c.n, 0.125f, o, b);
        std::vector<float> x(std::size_t(c.n_q) * c.D), y(x.size());
        a.finalize(x.data());
        b.finalize(y.data());
        ASSERT_EQ(x, y) << simd_level_name(level);
    }
}

TEST(PqAttention, BadOptionsAreErrors) {
    const Case c{32, 8, 8, 2, 64, Rotation::none, false, RopePairs::none};
    auto K = test::gaussian(std::size_t(c.n) * c.D, 7);
    Coded ck = code(K, c.n, c, 1);
    std::vector<float> q(c.n_q * c.D, 0.1f);
    AttentionPartial part(c.n_q, c.D);
    PqAttentionOptions perm;
    perm.values = PqValuePath::permute;
    EXPECT_THROW(attend_pq(q.data(), c.n_q, ck.pq, ck.pq, ck.blocks.data(), ck.blocks.data(), c.n, 1.0f, perm, part), Error);
    PqAttentionOptions bf16;
    bf16.values = PqValuePath::bf16;  // 8-bit codes
    EXPECT_THROW(attend_pq(q.data(), c.n_q, ck.pq, ck.pq, ck.blocks.data(), ck.blocks.data(), c.n, 1.0f, bf16, part), Error);
    ProductQuantizer untrained(PQParams{});
    AttentionPartial p128(c.n_q, 128);
    EXPECT_THROW(attend_pq(q.data(), c.n_q, untrained, untrained, nullptr, nullptr, 1, 1.0f, {}, p128), Error);
}

}  // namespace
}  // namespace aqpim
