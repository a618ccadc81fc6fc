#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "aqpim/half.h"

namespace aqpim {
namespace {

TEST(Half, Fp16ScalarRoundTripsEveryHalf) {
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
        float f = fp16_to_f32_scalar(f16_t(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(fp16_to_f32_scalar(f32_to_fp16_scalar(f))));
            continue;
        }
        ASSERT_EQ(f32_to_fp16_scalar(f), f16_t(h)) << "half bits " << h;
    }
}

TEST(Half, Fp16ScalarKnownValues) {
    EXPECT_EQ(f32_to_fp16_scalar(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_fp16_scalar(-2.0f), 0xc000);
    EXPECT_EQ(f32_to_fp16_scalar(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_fp16_scalar(65520.0f), 0x7c00);  // rounds to inf
    EXPECT_EQ(f32_to_fp16_scalar(5.9604645e-8f), 0x0001);
    EXPECT_EQ(f32_to_fp16_scalar(2.9802322e-8f), 0x0000);  // exactly half the smallest subnormal: ties to even
    EXPECT_EQ(f32_to_fp16_scalar(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
    EXPECT_EQ(f32_to_fp16_scalar(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
    EXPECT_FLOAT_EQ(fp16_to_f32_scalar(0x3555), 0.333251953125f);
}

TEST(Half, Bf16ScalarRoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16_scalar(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16_scalar(f32_from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
    EXPECT_EQ(f32_to_bf16_scalar(f32_from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
    EXPECT_EQ(f32_to_bf16_scalar(f32_from_bits(0x3f808001u)), 0x3f81);
    EXPECT_TRUE(std::isnan(bf16_to_f32_scalar(f32_to_bf16_scalar(NAN))));
}

// Every SIMD level must produce the bits of the scalar specification, on odd sizes.
TEST(Half, EverySimdLevelMatchesScalar) {
    std::mt19937 rng(7);
    std::vector<float> src(1037);
    std::uniform_int_distribution<std::uint32_t> bits;
    for (std::size_t i = 0; i < src.size(); ++i) {
        // mix of ordinary values, huge/tiny magnitudes (overflow, subnormals) and random bit patterns
        switch (i % 4) {
            case 0: src[i] = std::ldexp(float(rng() % 20000) / 10000.0f - 1.0f, int(rng() % 60) - 30); break;
            case 1: src[i] = float(rng() % 200000) - 100000.0f; break;
            case 2: src[i] = std::ldexp(1.0f + float(rng() % 1024) / 1024, -int(rng() % 30) - 10); break;
            default: src[i] = f32_from_bits(bits(rng)); break;
        }
    }
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(15), std::size_t(17), src.size()}) {
        std::vector<f16_t> h_ref(n), h(n);
        std::vector<bf16_t> b_ref(n), b(n);
        std::vector<float> f_ref(n), f(n);
        const HalfKernels& ref = half_kernels(SimdLevel::ref);
        ref.f32_to_fp16(src.data(), h_ref.data(), n);
        ref.f32_to_bf16(src.data(), b_ref.data(), n);
        for (SimdLevel level : supported_simd_levels()) {
            const HalfKernels& k = half_kernels(level);
            k.f32_to_fp16(src.data(), h.data(), n);
            k.f32_to_bf16(src.data(), b.data(), n);
            for (std::size_t i = 0; i < n; ++i) {
                ASSERT_EQ(h[i], h_ref[i]) << simd_level_name(level) << " fp16 of " << src[i];
                ASSERT_EQ(b[i], b_ref[i]) << simd_level_name(level) << " bf16 of " << src[i];
            }
            ref.fp16_to_f32(h_ref.data(), f_ref.data(), n);
            k.fp16_to_f32(h_ref.data(), f.data(), n);
            for (std::size_t i = 0; i < n; ++i)
                ASSERT_EQ(bits_from_f32(f[i]), bits_from_f32(f_ref[i])) << simd_level_name(level);
            ref.bf16_to_f32(b_ref.data(), f_ref.data(), n);
            k.bf16_to_f32(b_ref.data(), f.data(), n);
            for (std::size_t i = 0; i < n; ++i)
                ASSERT_EQ(bits_from_f32(f[i]), bits_from_f32(f_ref[i])) << simd_level_name(level);
        }
    }
}

}  // namespace
}  // namespace aqpim
