// The tensor-core value path of the CUDA PQ kernel (src/cuda/mma_tile.h, pq_attention_mma.cu) on
// the CPU: the one-hot and weight fragments through an emulated mma.sync give the value histogram
// the histogram kernel adds up token by token, and whole problems through the kernel's
// decomposition agree with the double-precision reference within the f16 rounding of the weights.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "aqpim/half.h"
#include "cuda/host_problem.h"
#include "cuda/mma_emulation.h"

namespace aqpim {
namespace {

using namespace aqpim::cuda;

// The f16 weights are the only rounding the MMA path adds: each weight is off by at most a
// relative 2^-11 (f16's unit roundoff), so an output (a weighted mean of values) moves by at most
// 2^-11 of the largest |value| it averages. Measured here: 6e-5 to 9e-5 of the largest output.
constexpr double kMmaTolerance = 1.0 / 2048;

TEST(CudaMma, CodePairsAndOneHotAreF16) {
    for (std::uint32_t lo = 0; lo < 16; ++lo)
        for (std::uint32_t hi = 0; hi < 16; ++hi) {
            const std::uint32_t dword = 0xA5000000u | ((hi << 4 | lo) << 8) | 0x3Cu;  // byte 1 holds the pair
            const std::uint32_t pair = code_pair_h2(dword, 1);
            EXPECT_EQ(fp16_to_f32_scalar(std::uint16_t(pair & 0xFFFFu)), 1024.0f + float(lo));
            EXPECT_EQ(fp16_to_f32_scalar(std::uint16_t(pair >> 16)), 1024.0f + float(hi));
            for (int r = 0; r < 16; ++r) {
                const std::uint32_t oh = onehot_h2(pair, r);
                EXPECT_EQ(fp16_to_f32_scalar(std::uint16_t(oh & 0xFFFFu)), r == int(lo) ? 1.0f : 0.0f);
                EXPECT_EQ(fp16_to_f32_scalar(std::uint16_t(oh >> 16)), r == int(hi) ? 1.0f : 0.0f);
            }
        }
}

TEST(CudaMma, WeightsKeepTheirRelativePrecisionDownTo2ToTheMinus29) {
    // Unscaled, f16 would make weights below 2^-14 subnormal (up to 50% off) and round those below
    // 2^-25 to zero: a peaked softmax over many tokens would lose weight.
    for (double e = 0.0; e <= 29.0; e += 0.37) {
        const float p = float(std::exp2(-e));
        EXPECT_LE(std::abs(weight_from_half(weight_to_half(p)) - p), p / 2048) << "p = 2^-" << e;
    }
    EXPECT_EQ(weight_from_half(weight_to_half(1.0f)), 1.0f);
    EXPECT_EQ(weight_from_half(weight_to_half(0.0f)), 0.0f);
}

TEST(CudaMma, WeightSlotsCoverEveryTokenAndHeadOnce) {
    std::vector<int> seen(2 * 2 * kWeightBlockDwords, 0);
    for (int t = 0; t < 32; ++t)
        for (int h = 0; h < kMmaHeads; ++h) {
            const int i = weight_half_index(t, h);
            ASSERT_GE(i, 0);
            ASSERT_LT(i, 2 * kWeightBlockDwords);
            ++seen[i];
        }
    int used = 0;
    for (int c : seen) {
        EXPECT_LE(c, 1);
        used += c;
    }
    EXPECT_EQ(used, 32 * kMmaHeads);
}

// For every head count the kernels are built for, random codes and weights: the warp's mma over
// one 32-token block equals the direct histogram of the f16-rounded weights, bin by bin.
TEST(CudaMma, FragmentsThroughMmaGiveTheValueHistogram) {
    std::mt19937_64 rng(7);
    for (int nq : {1, 2, 4, 8})
        for (int Mv : {4, 12, 32}) {
            std::vector<std::uint32_t> mem(block_dwords(Mv)), staged(mma_staged_dword(block_dwords(Mv)));
            for (auto& w : mem) w = std::uint32_t(rng());
            for (int i = 0; i < block_dwords(Mv); ++i) staged[mma_staged_dword(i)] = mem[i];
            std::vector<float> p(32 * nq);
            std::uniform_real_distribution<float> u(0.0f, 1.0f);
            for (float& x : p) x = u(rng);
            const std::vector<std::uint16_t> wf = emulation::weight_fragments(p.data(), nq);
            for (int m = 0; m < Mv; ++m) {
                float acc[32][4] = {};
                emulation::accumulate_block(staged.data(), wf, nq, m, acc);
                std::vector<double> want(kKsub * nq, 0.0);
                for (int t = 0; t < 32; ++t)
                    for (int h = 0; h < nq; ++h)
                        want[code4(mem.data(), kGroupDwords, t, m) * nq + h] +=
                            fp16_to_f32_scalar(f32_to_fp16_scalar(p[t * nq + h] * kWeightScale));
                for (int lane = 0; lane < 32; ++lane)
                    for (int e = 0; e < 4; ++e) {
                        const int c = acc_code(lane >> 2, e), h = acc_head(lane & 3, e);
                        const double expect = h < nq ? want[c * nq + h] : 0.0;
                        ASSERT_NEAR(acc[lane][e], expect, 1e-5 * kWeightScale) << "nq=" << nq << " Mv=" << Mv << " m=" << m << " c=" << c
                                                                 << " h=" << h;
                    }
            }
        }
}

TEST(CudaMma, KernelDecompositionMatchesTheReference) {
    // Paged, shuffled pages, several versions changing inside chunks, partial tiles and blocks,
    // f16 sinks/window, GQA 1..8 (padded instances), D 64/128, M 4..64.
    const PqProblemSpec specs[] = {
        pq_spec(1, 1, 1, 64, 16, 16, 32, 1, {32}, {0}, 1, 41),
        pq_spec(2, 2, 4, 128, 32, 32, 64, 2, {300, 451}, {20, 68}, 2, 42),
        pq_spec(3, 2, 3, 64, 32, 16, 32, 3, {1000, 37, 640}, {4}, 3, 43),
        pq_spec(1, 2, 8, 128, 64, 64, 256, 2, {1500}, {68}, 3, 44),
        pq_spec(2, 1, 7, 128, 16, 32, 128, 1, {129, 0}, {0, 5}, 1, 45),
        pq_spec(1, 1, 5, 64, 8, 4, 96, 2, {700}, {3}, 2, 46),
        pq_spec(1, 2, 4, 128, 32, 32, 256, 1, {4000}, {0}, 16, 47),  // sharply peaked: scale set below
    };
    for (PqProblemSpec spec : specs) {
        if (spec.seed == 47) spec.shape.scale = 12.0f / std::sqrt(float(spec.shape.D));
        const HostPqProblem h = make_random_pq_problem(spec);
        const std::vector<double> ref = reference_attention(h);
        const std::vector<float> emu = emulation::pq_attention_mma(h, spec.shape.D == 128 ? 8 : 16);
        const double err = max_relative_error(emu.data(), ref.data(), ref.size());
        EXPECT_LT(err, kMmaTolerance) << "seed " << spec.seed;
        // The f16 weights must be what limits it: the f32 histogram path is 100x closer.
        const std::vector<float> hist = emulation::pq_attention(h, spec.shape.D == 128 ? 8 : 16);
        EXPECT_LT(max_relative_error(hist.data(), ref.data(), ref.size()), 2e-5) << "seed " << spec.seed;
    }
}

}  // namespace
}  // namespace aqpim
