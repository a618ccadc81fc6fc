// The CUDA kernels' per-thread and per-tile arithmetic (src/cuda/pq_tile.h), run on the CPU against
// the CPU engine: the 4-bit block layout, encode against ProductQuantizer::encode, lookup-table
// scores, the online-softmax merge, and whole decode-attention problems (paged, several codebook
// versions, f16 sinks/window) through the kernels' decomposition against attend_pq_spans.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <numeric>
#include <random>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/attention.h"
#include "aqpim/cuda_pq.h"
#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "cuda/host_problem.h"
#include "cuda/pq_tile.h"
#include "cuda/pq_upload.h"
#include "cuda/kernel_emulation.h"
#include "cuda/mma_emulation.h"
#include "cuda/engine_problem.h"
#include "support/random.h"

namespace aqpim {
namespace {

using namespace aqpim::cuda;
using namespace aqpim::cuda_test;

TEST(CudaTile, Code4ReadsThePackedLayout) {
    for (int M : {4, 12, 16, 32, 64}) {
        const std::int64_t n = 77;
        const auto codes = test::random_codes(std::size_t(n) * M, 16, M);
        std::vector<std::uint8_t> blocks(code_blocks_for(n) * code_block_bytes(M, 4));
        pack_code_blocks(codes.data(), n, M, 4, blocks.data());
        ASSERT_EQ(std::size_t(block_bytes(M)), code_block_bytes(M, 4));
        std::vector<std::uint32_t> written(blocks.size() / 4, 0u);
        for (std::int64_t t = 0; t < n; ++t) {
            const auto* block = reinterpret_cast<const std::uint32_t*>(blocks.data()) + (t / 32) * block_dwords(M);
            std::vector<std::uint32_t> staged(block_dwords(M) + block_dwords(M) / 16);
            for (int i = 0; i < block_dwords(M); ++i) staged[staged_dword(i)] = block[i];
            for (int m = 0; m < M; ++m) {
                const int want = codes[t * M + m];
                EXPECT_EQ(code4(block, kGroupDwords, int(t % 32), m), want) << "M=" << M << " t=" << t << " m=" << m;
                EXPECT_EQ(code4(staged.data(), kStageGroupDwords, int(t % 32), m), want);
                written[(t / 32) * block_dwords(M) + code4_dword(int(t % 32), m)] |= std::uint32_t(want)
                                                                                       << code4_shift(int(t % 32), m);
            }
        }
        // OR-ing each nibble into a zeroed block (the encode kernel) gives the packed bytes.
        EXPECT_EQ(0, std::memcmp(written.data(), blocks.data(), blocks.size())) << "M=" << M;
    }
}

TEST(CudaTile, NearestCodeMatchesProductQuantizerEncode) {
    for (auto [D, M, scale, rot, nbits] :
         {std::tuple{128, 32, true, Rotation::none, 4}, std::tuple{128, 64, false, Rotation::none, 4},
          std::tuple{64, 16, true, Rotation::none, 4}, std::tuple{128, 32, true, Rotation::hadamard, 4},
          std::tuple{64, 16, false, Rotation::random_orthogonal, 4}, std::tuple{128, 32, true, Rotation::none, 8},
          std::tuple{128, 16, false, Rotation::none, 8}, std::tuple{64, 16, true, Rotation::none, 8},
          std::tuple{128, 32, true, Rotation::hadamard, 8}}) {
        const ProductQuantizer pq = trained_pq(D, M, scale, 7, rot, nbits);
        const CudaCodebook cb = cuda_codebook(pq);
        EXPECT_EQ(cb.rotation.empty(), rot == Rotation::none);
        ASSERT_EQ(cb.centroids.size(), std::size_t(ksub_of(nbits)) * D);
        const PqCodebookView view = view_of(cb, D);
        const int n = 300;
        const auto x = test::gaussian(std::size_t(n) * D, 9, 3.0f);
        std::vector<std::uint8_t> codes(std::size_t(n) * M);
        pq.encode(x.data(), n, codes.data());
        int differ = 0;
        for (int i = 0; i < n; ++i)
            for (int m = 0; m < M; ++m) differ += nearest_code(x.data() + std::size_t(i) * D, view, D / M, m) != codes[i * M + m];
        // Same nearest centroid up to float rounding of near-ties (x / s here, x * (1 / s) there;
        // a dense product here, the fast Hadamard transform there; at 8 bits the CPU ranks by
        // |c|^2 - 2 y.c, the kernel by the sum of (y - c)^2, and 256 centroids have closer ties).
        EXPECT_LE(differ, n * M / (nbits == 8 ? 200 : 1000)) << "D=" << D << " M=" << M << " rotation " << int(rot)
                                                              << " nbits " << nbits;
    }
}

TEST(CudaTile, LookupScoresMatchTheCpuScan) {
    for (const Rotation rot : {Rotation::none, Rotation::hadamard, Rotation::random_orthogonal}) {
    const int D = 128, M = 32, n_q = 3;
    const ProductQuantizer pq = trained_pq(D, M, true, 3, rot);
    const CudaCodebook cb = cuda_codebook(pq);
    const PqCodebookView view = view_of(cb, D);
    const auto q = test::gaussian(std::size_t(n_q) * D, 4);
    const float scale = 0.125f;
    const std::int64_t n = 96;
    const auto codes = test::random_codes(std::size_t(n) * M, 16, 5);
    std::vector<std::uint8_t> blocks(code_blocks_for(n) * code_block_bytes(M, 4));
    pack_code_blocks(codes.data(), n, M, 4, blocks.data());
    // CPU: transform_query, scale, build_lut, scan_f32 (reference level).
    std::vector<float> qy(q.size()), lut(std::size_t(n_q) * M * 16), scores(std::size_t(n_q) * n);
    pq.transform_query(q.data(), qy.data(), n_q);
    for (float& v : qy) v *= scale;
    const PqKernels& k = pq_kernels(SimdLevel::ref);
    k.build_lut(qy.data(), n_q, M, 16, D / M, pq.centroids(), lut.data(), nullptr);
    k.scan_f32(lut.data(), n_q, M, 4, blocks.data(), code_blocks_for(n), scores.data(), n);
    for (int h = 0; h < n_q; ++h) {
        std::vector<float> qyh(D), luth(M * 16);
        for (int i = 0; i < D; ++i) qyh[i] = query_in_quantizer_space(q.data() + h * D, view, scale, i);
        for (int m = 0; m < M; ++m)
            for (int c = 0; c < 16; ++c) luth[m * 16 + c] = lut_entry(qyh.data(), view.cb, D / M, m, c);
        for (std::int64_t t = 0; t < n; ++t) {
            const auto* block = reinterpret_cast<const std::uint32_t*>(blocks.data()) + (t / 32) * block_dwords(M);
            const float got = token_score(luth.data(), block, kGroupDwords, int(t % 32), M);
            EXPECT_NEAR(got, scores[h * n + t], 1e-4f * (1.0f + std::abs(scores[h * n + t]))) << "rotation " << int(rot);
        }
    }
    }
}

TEST(CudaTile, MergeStatsMatchesAttentionPartialMerge) {
    const int D = 4;
    AttentionPartial a(1, D), b(1, D), empty(1, D);
    a.max = {1.5f};
    a.sum = {2.0f};
    a.acc = {1, 2, 3, 4};
    b.max = {3.0f};
    b.sum = {0.5f};
    b.acc = {-1, 0, 1, 2};
    float m = a.max[0], l = a.sum[0];
    std::vector<float> acc = a.acc;
    const MergeFactors f = merge_stats(m, l, b.max[0], b.sum[0]);
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * f.a + b.acc[d] * f.b;
    a.merge(b);
    EXPECT_FLOAT_EQ(m, a.max[0]);
    EXPECT_NEAR(l, a.sum[0], 1e-6f);
    for (int d = 0; d < D; ++d) EXPECT_NEAR(acc[d], a.acc[d], 1e-6f);
    // Merging nothing changes nothing; merging into nothing copies.
    float m0 = kNegInf, l0 = 0.0f;
    const MergeFactors g = merge_stats(m0, l0, kNegInf, 0.0f);
    EXPECT_EQ(g.b, 0.0f);
    EXPECT_EQ(m0, kNegInf);
    const MergeFactors e = merge_stats(m0, l0, 2.0f, 3.0f);
    EXPECT_EQ(e.a, 0.0f);
    EXPECT_EQ(e.b, 1.0f);
    EXPECT_EQ(l0, 3.0f);
    EXPECT_EQ(rescale(kNegInf, 1.0f), 0.0f);
}

TEST(CudaTile, CombineLoadsInBatchesAndMergesInOrder) {
    // combine_element against AttentionPartial::merge, partial by partial, for counts around the
    // batch size and long lists; every fifth partial is an empty chunk (max -inf, sum 0).
    const int n_q = 3, D = 8;
    for (int n_parts : {1, 7, 8, 9, 16, 130}) {
        std::mt19937_64 rng{std::uint64_t(n_parts)};
        std::normal_distribution<float> g(0.0f, 2.0f);
        std::vector<float> ml(std::size_t(n_parts + 2) * n_q * 2), acc(std::size_t(n_parts + 2) * n_q * D);
        for (float& x : acc) x = g(rng);
        for (std::size_t i = 0; i < ml.size(); i += 2) {
            const bool empty = (i / 2 / n_q) % 5 == 3;
            ml[i] = empty ? kNegInf : g(rng);
            ml[i + 1] = empty ? 0.0f : std::abs(g(rng)) + 0.1f;
        }
        const int base = 2;  // partials of an earlier stream come first
        for (int h = 0; h < n_q; ++h) {
            AttentionPartial want(1, D);
            for (int c = 0; c < n_parts; ++c) {
                AttentionPartial part(1, D);
                const std::size_t slot = std::size_t(base + c) * n_q + h;
                part.max = {ml[slot * 2]};
                part.sum = {ml[slot * 2 + 1]};
                part.acc.assign(acc.begin() + slot * D, acc.begin() + (slot + 1) * D);
                want.merge(part);
            }
            std::vector<float> out(D);
            want.finalize(out.data());
            for (int d = 0; d < D; ++d)
                EXPECT_NEAR(combine_element(ml.data(), acc.data(), n_q, D, n_parts, base, h, d), out[d],
                            1e-5f * (1.0f + std::abs(out[d])))
                    << "n_parts=" << n_parts << " h=" << h << " d=" << d;
        }
    }
}

TEST(CudaTile, ReferenceAndKernelDecompositionMatchTheCpuEngine) {
    struct Case {
        int batch, n_kv_heads, n_q, D, Mk, Mv, page, versions;
        std::vector<int> n_coded;
        int n_f16;
    };
    const Case cases[] = {
        {2, 2, 4, 128, 32, 32, 64, 2, {300, 451}, 20},  // partial last page and block, two versions
        {1, 1, 3, 64, 16, 32, 32, 3, {200}, 5},          // odd GQA ratio, more versions than chunks
        {1, 2, 8, 128, 64, 16, 128, 1, {129}, 0},        // M = 64 keys, no f16 rows
        {1, 1, 1, 64, 8, 8, 32, 1, {0}, 40},             // f16 rows only
    };
    for (const Case& c : cases) {
        const EngineProblem e = engine_problem(c.batch, c.n_kv_heads, c.n_q, c.D, c.Mk, c.Mv, c.page, c.versions, c.n_coded, c.n_f16);
        const std::vector<float> cpu = cpu_engine_attention(e);
        const std::vector<double> ref = reference_attention(e.h);
        const std::vector<float> emu = emulation::pq_attention(e.h, c.D == 128 ? 8 : 16);
        EXPECT_LT(max_relative_error(cpu.data(), ref.data(), ref.size()), 2e-5) << "D=" << c.D << " n_q=" << c.n_q;
        EXPECT_LT(max_relative_error(emu.data(), ref.data(), ref.size()), 2e-5) << "D=" << c.D << " n_q=" << c.n_q;
    }
}

TEST(CudaTile, RotatedQuantizersThroughBothKernelDecompositions) {
    // Hadamard and random orthogonal quantizers from the CPU engine, as dense rotations: both value
    // paths' decompositions against attend_pq_spans (which applies the rotations its own way) and
    // against the reference; every version rotated differently.
    for (const Rotation rot : {Rotation::hadamard, Rotation::random_orthogonal}) {
        const EngineProblem e = engine_problem(2, 2, 4, 128, 32, 32, 64, 2, {300, 200}, 20, rot);
        ASSERT_FALSE(e.h.k_rot.empty());
        ASSERT_FALSE(e.h.v_rot.empty());
        const std::vector<float> cpu = cpu_engine_attention(e);
        const std::vector<double> ref = reference_attention(e.h);
        EXPECT_LT(max_relative_error(cpu.data(), ref.data(), ref.size()), 2e-5) << int(rot);
        const std::vector<float> hist = emulation::pq_attention(e.h, 8);
        EXPECT_LT(max_relative_error(hist.data(), ref.data(), ref.size()), 2e-5) << int(rot);
        const std::vector<float> mma = emulation::pq_attention_mma(e.h, 8);
        EXPECT_LT(max_relative_error(mma.data(), ref.data(), ref.size()), 1.0 / 2048) << int(rot);
    }
    // Random dense rotations on random problems (D = 64, several versions and chunks).
    PqProblemSpec spec = pq_spec(2, 2, 3, 64, 16, 8, 32, 3, {500, 90}, {6}, 2, 9);
    spec.rotated = true;
    const HostPqProblem h = make_random_pq_problem(spec);
    const std::vector<double> ref = reference_attention(h);
    const std::vector<float> hist = emulation::pq_attention(h, 16);
    EXPECT_LT(max_relative_error(hist.data(), ref.data(), ref.size()), 2e-5);
    const std::vector<float> mma = emulation::pq_attention_mma(h, 16);
    EXPECT_LT(max_relative_error(mma.data(), ref.data(), ref.size()), 1.0 / 2048);
}

TEST(CudaTile, KernelDecompositionOnRandomProblems) {
    // Random codebooks, gains and permutations (no training): many chunks, versions changing
    // inside chunks, sequences of different lengths.
    // Then codes from {0, 1} only: the histogram path's token pairs mostly share a bin.
    for (const int code_values : {0, 2}) {
        PqProblemSpec spec = pq_spec(3, 2, 5, 128, 32, 64, 64, 4, {1000, 37, 640}, {64, 4, 17}, 3, 1);
        spec.code_values = code_values;
        const HostPqProblem h = make_random_pq_problem(spec);
        for (std::size_t i = 0; code_values > 0 && i < h.pool.size(); i += 97) {
            ASSERT_LT(h.pool[i] & 15, code_values);
        }
        const std::vector<double> ref = reference_attention(h);
        const std::vector<float> emu = emulation::pq_attention(h, 8);
        EXPECT_LT(max_relative_error(emu.data(), ref.data(), ref.size()), 2e-5) << "codes < " << code_values;
    }
}

TEST(CudaTile, RejectsWhatTheKernelsCannotRead) {
    PQParams p;
    p.D = 128;
    p.M = 4;  // 8-bit codes with D / M = 32: the encode holds at most 16 dims of a subvector
    p.nbits = 8;
    ProductQuantizer pq8(p);
    const auto x = test::gaussian(std::size_t(300) * 128, 1);
    pq8.train(x.data(), 300);
    EXPECT_THROW(cuda_codebook(pq8), Error);
    p.nbits = 4;
    p.M = 128;  // D / M = 1: more subspaces than the kernels hold
    ProductQuantizer fine(p);
    fine.train(x.data(), 300);
    EXPECT_THROW(cuda_codebook(fine), Error);
    // A rotated value codebook needs D / Mv <= 16 (the flush's buffer overlays the histograms).
    PqProblemSpec coarse = pq_spec(1, 1, 1, 128, 32, 4, 32, 1, {32}, {0}, 1, 1);
    coarse.rotated = true;
    const HostPqProblem hc = make_random_pq_problem(coarse);
    PqAttentionParams pc = hc.view();
    pc.part_ml = pc.part_acc = pc.out = reinterpret_cast<float*>(8);  // present; never read by the check
    EXPECT_THROW(check_pq_attention_params(pc), std::runtime_error);
    EXPECT_THROW(make_random_pq_problem(pq_spec(1, 1, 9, 128, 32, 32, 32, 1, {32}, {0}, 1, 1)), std::runtime_error);
}

}  // namespace
}  // namespace aqpim
