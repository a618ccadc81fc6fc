// The benchmark helpers whose figures the docs quote: every SIMD level of the f16 streaming probe
// computes what it says (F multiply-adds on every value, the tail included), and bad arguments
// are refused; the clock probe's add loops do exactly the adds it counts.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "aqpim/bench_util.h"
#include "aqpim/error.h"
#include "aqpim/half.h"
#include "core/core_clock.h"
#include "support/simd_guard.h"

namespace aqpim {
namespace {

TEST(BenchUtil, F16StreamDoesItsMultiplyAddsOnEveryValueAtEveryLevel) {
    // 1000 values (2000 bytes): whole 256- and 128-byte blocks plus a tail for the SIMD kernels.
    std::vector<f16_t> h(1000);
    double sum = 0;
    for (std::size_t i = 0; i < h.size(); ++i) {
        const float x = float(int(i % 17) - 8) / 8.0f + 0.03125f * float(i % 5);
        h[i] = f32_to_fp16_scalar(x);
        sum += fp16_to_f32_scalar(h[i]);
    }
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(h.data());
    for (SimdLevel level : supported_simd_levels()) {
        test::SimdLevelGuard guard(level);
        for (int macs : {0, 1, 4, 8}) {
            double weight = macs == 0 ? 1.0 : 0.0;  // the kernels' multiply-add weights 1 + f/8
            for (int f = 0; f < macs; ++f) weight += 1.0 + 0.125 * f;
            const double expect = sum * weight;
            EXPECT_NEAR(stream_f16_with_macs(bytes, h.size() * 2, macs), expect, 1e-4 * (1 + std::fabs(expect)) + 1e-3)
                << simd_level_name(level) << " macs=" << macs;
            // a prefix that ends inside a block
            double prefix = 0;
            for (std::size_t i = 0; i < 77; ++i) prefix += fp16_to_f32_scalar(h[i]);
            EXPECT_NEAR(stream_f16_with_macs(bytes, 154, macs), prefix * weight, 1e-4 * (1 + std::fabs(prefix * weight)))
                << simd_level_name(level) << " macs=" << macs << " n=154";
        }
    }
    EXPECT_THROW(stream_f16_with_macs(bytes, 2000, 9), Error);
    EXPECT_THROW(stream_f16_with_macs(bytes, 2000, -1), Error);
}

TEST(BenchUtil, ClockProbeLoopsDoEightAddsPerIteration) {
    // Every register starts at 1 and every add adds 3, so 8 n adds leave a sum of (registers) + 24 n
    // whichever way they are chained. The scalar loop sums 4 registers; the vector loops 8
    // registers of 32-bit lanes, and return the low 64-bit lane (two 32-bit lanes, no carry).
    const std::vector<SimdLevel> levels = supported_simd_levels();
    auto has = [&](SimdLevel l) { return std::find(levels.begin(), levels.end(), l) != levels.end(); };
    for (std::uint64_t n : {1u, 7u, 1000u}) {
        for (bool independent : {false, true}) {
            EXPECT_EQ(add_loop_ref(n, independent), 4 + 24 * n) << n;
            const std::uint64_t lane = 8 + 24 * n;
            if (has(SimdLevel::avx2)) {
                EXPECT_EQ(add_loop_avx2(n, independent), lane | lane << 32) << n;
            }
            if (has(SimdLevel::avx512)) {
                EXPECT_EQ(add_loop_avx512(n, independent), lane | lane << 32) << n;
            }
        }
    }
    const CoreClock c = measure_core_clock();
    EXPECT_GT(c.ghz, 0);
    EXPECT_GT(c.vector_gops, 0);
}

}  // namespace
}  // namespace aqpim
