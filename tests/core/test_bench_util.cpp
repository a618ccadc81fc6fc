// The benchmark helpers whose figures the docs quote: every SIMD level of the f16 streaming probe
// computes what it says (F multiply-adds on every value, the tail included), and bad arguments
// are refused.

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "aqpim/bench_util.h"
#include "aqpim/error.h"
#include "aqpim/half.h"
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

}  // namespace
}  // namespace aqpim
