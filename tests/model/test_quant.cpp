// Weight formats and products: hand-built blocks against values worked out by hand, llama.cpp's
// quantizer rounding rules, round-trip error bounds per type, every SIMD level against the scalar
// reference (dequantization bit for bit, products within float rounding), matvec against a double
// dot with a proven bound for the activation quantization, matmul against matvec, thread-count
// independence, and bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/weights.h"
#include "aqpim/workspace.h"
#include "model/quant_blocks.h"
#include "support/random.h"
#include "support/simd_guard.h"

namespace aqpim {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;

// ---- named tolerances --------------------------------------------------------------------------

// Round trip of Gaussian data: max |error| relative to the block's max |x| (Q8_0: half a step of
// amax/127 plus the f16 rounding of d; Q4_0: one step of amax/8 on the clamped side), and RMS
// error relative to RMS(x) for the K types (their simple quantizers clip a little).
constexpr double kQ8_0MaxErr = 0.57 / 127;
constexpr double kQ4_0MaxErr = 1.02 / 8;
constexpr double kF16RelErr = 1.0 / 2048;  // half an ulp of an 11-bit significand...
constexpr double kF16AbsErr = 0x1p-25;     // ...or half the subnormal spacing below 2^-14
constexpr double kBf16RelErr = 1.0 / 256;
// RMS bounds: 1.25 x what the quantizers reach on this test's data (Gaussian with every 97th
// value x8; measured 0.0088, 0.142, 0.097, 0.027).
constexpr double kQ8_0Rms = 0.011, kQ4_0Rms = 0.18, kQ4_KRms = 0.12, kQ6_KRms = 0.034;
// SIMD products vs ref, and matvec vs a double dot of the same operands: float summation order
// only, relative to sum |w_i x_i|.
constexpr double kSumOrderRel = 1e-5;

const GgmlType kAllTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K};

std::string tname(GgmlType t) { return ggml_type_name(t); }

int block_of(GgmlType t) { return ggml_type_traits(t).block_size; }

/// rows x cols Gaussian weights quantized to `type`.
std::vector<std::uint8_t> make_weights(GgmlType type, std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    const auto w = test::gaussian(std::size_t(rows * cols), seed, 0.05f);
    std::vector<std::uint8_t> data(ggml_row_bytes(type, cols) * std::size_t(rows));
    quantize(type, w.data(), data.data(), rows * cols);
    return data;
}

/// Overwrite the code bytes of every block (everything but d / dmin) with random bytes, so kernels
/// see every nibble, -128 int8 codes and arbitrary 6-bit scales.
void randomize_codes(GgmlType type, std::vector<std::uint8_t>& data, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const auto traits = ggml_type_traits(type);
    for (std::size_t off = 0; off + traits.block_bytes <= data.size(); off += traits.block_bytes) {
        std::uint8_t* b = data.data() + off;
        std::size_t lo = 0, hi = std::size_t(traits.block_bytes);
        switch (type) {
            case GgmlType::Q8_0:
            case GgmlType::Q4_0: lo = 2; break;
            case GgmlType::Q4_K: lo = 4; break;
            case GgmlType::Q6_K: hi = 208; break;
            default: return;
        }
        for (std::size_t i = lo; i < hi; ++i) b[i] = std::uint8_t(rng());
    }
}

std::vector<float> dequantized(GgmlType type, const std::vector<std::uint8_t>& data, std::int64_t n) {
    std::vector<float> out(static_cast<std::size_t>(n));
    dequantize(type, data.data(), out.data(), n);
    return out;
}

/// The activation exactly as the integer kernels see it (quantize_x_ref, dequantized).
std::vector<float> quantized_x(const std::vector<float>& x) {
    quant::QuantizedX qx;
    quant::quantize_x_ref(x.data(), std::int64_t(x.size()), qx);
    std::vector<float> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = qx.d[i / 32] * float(qx.q[i]);
    return out;
}

// ---- formats -------------------------------------------------------------------------------------

TEST(QuantFormat, BlockBytesMatchGgmlTraits) {
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 32), sizeof(BlockQ8_0));
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_0, 32), sizeof(BlockQ4_0));
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_K, 256), sizeof(BlockQ4_K));
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 256), sizeof(BlockQ6_K));
}

TEST(QuantFormat, Q8_0HandBuilt) {
    BlockQ8_0 b;
    b.d = f32_to_fp16_scalar(0.25f);
    for (int i = 0; i < 32; ++i) b.qs[i] = std::int8_t(-4 * i + 3);
    b.qs[5] = -128;
    float y[32];
    dequantize(GgmlType::Q8_0, &b, y, 32);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], i == 5 ? -32.0f : float(-i) + 0.75f) << i;
}

TEST(QuantFormat, Q8_0RoundsHalfAwayFromZeroAsRoundf) {
    // Ties (x * 127 / amax exactly k + 0.5) and every value between go to std::round's integer.
    float x[32];
    for (int j = 0; j < 32; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * (float(j) * 3.5f + (j % 3 == 0 ? 0.0f : 0.37f));
    x[31] = 127.0f;  // amax: the scale is exactly 1
    BlockQ8_0 b;
    quantize(GgmlType::Q8_0, x, &b, 32);
    ASSERT_EQ(fp16_to_f32_scalar(b.d), 1.0f);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], std::int8_t(std::round(x[j]))) << j << " " << x[j];
}

TEST(QuantFormat, Q8_0IsTheScalarDefinitionOnRandomBlocks) {
    // d = amax / 127 in f32, qs = std::round(x * (1 / d)): the SSE4.1 block against that
    // definition on 4096 blocks of every magnitude, with exact ties and zero blocks among them.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<int> e(-20, 20);
    const int nb = 4096;
    std::vector<float> x(std::size_t(nb) * 32);
    for (int b = 0; b < nb; ++b) {
        const float scale = std::ldexp(1.0f, e(rng));
        for (int j = 0; j < 32; ++j) x[std::size_t(b) * 32 + j] = b % 97 == 0 ? 0.0f : u(rng) * scale;
        if (b % 5 == 0)  // ties: amax 127 * s, values k + 0.5 times s
            for (int j = 0; j < 32; ++j) x[std::size_t(b) * 32 + j] = (j == 0 ? 127.0f : float(j % 64) - 15.5f) * scale;
    }
    std::vector<BlockQ8_0> q(nb);
    quantize(GgmlType::Q8_0, x.data(), q.data(), std::int64_t(x.size()));
    for (int b = 0; b < nb; ++b) {
        const float* xb = x.data() + std::size_t(b) * 32;
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        ASSERT_EQ(q[b].d, f32_to_fp16_scalar(d)) << b;
        for (int j = 0; j < 32; ++j) ASSERT_EQ(q[b].qs[j], std::int8_t(std::round(xb[j] * id))) << b << " " << j;
    }
}

TEST(QuantFormat, Q4_0HandBuilt) {
    // Low nibbles are values 0-15, high nibbles values 16-31; value = (q - 8) * d.
    BlockQ4_0 b;
    b.d = f32_to_fp16_scalar(-0.5f);
    for (int j = 0; j < 16; ++j) b.qs[j] = std::uint8_t(j | ((15 - j) << 4));
    float y[32];
    dequantize(GgmlType::Q4_0, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], float(j - 8) * -0.5f) << j;
        EXPECT_EQ(y[16 + j], float(7 - j) * -0.5f) << j;
    }
}

TEST(QuantFormat, Q4_KHandBuilt) {
    const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 5}, m[8] = {0, 7, 62, 1, 20, 40, 63, 9};
    BlockQ4_K b;
    b.d = f32_to_fp16_scalar(0.25f);
    b.dmin = f32_to_fp16_scalar(0.125f);
    // bytes 0-3: sc0-3 | top bits of sc4-7; 4-7: m0-3 | top bits of m4-7; 8-11: low nibbles of sc4-7, m4-7
    for (int j = 0; j < 4; ++j) {
        b.scales[j] = std::uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
        b.scales[j + 4] = std::uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
        b.scales[j + 8] = std::uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = std::uint8_t((l % 16) | ((15 - l % 16) << 4));
    float y[256];
    dequantize(GgmlType::Q4_K, &b, y, 256);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            // chunk c: low nibbles -> sub-block 2c, high nibbles -> sub-block 2c+1
            EXPECT_EQ(y[64 * c + l], 0.25f * float(sc[2 * c] * (l % 16)) - 0.125f * float(m[2 * c])) << c << " " << l;
            EXPECT_EQ(y[64 * c + 32 + l], 0.25f * float(sc[2 * c + 1] * (15 - l % 16)) - 0.125f * float(m[2 * c + 1]))
                << c << " " << l;
        }
    std::uint8_t usc[8], um[8];
    quant::unpack_q4k_scales(b.scales, usc, um);
    for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(usc[j], sc[j]);
        EXPECT_EQ(um[j], m[j]);
    }
}

TEST(QuantFormat, Q4_KScaleUnpackingsAgree) {
    // The SIMD kernels' 64-bit-word unpacking against the byte-wise one, on random scale bytes.
    std::mt19937_64 rng(3);
    for (int t = 0; t < 1000; ++t) {
        std::uint8_t s[12], sc[8], m[8];
        for (auto& b : s) b = std::uint8_t(rng());
        quant::unpack_q4k_scales(s, sc, m);
        std::uint64_t lo, hi;
        quant::unpack_q4k_scales_words(s, lo, hi);
        for (int j = 0; j < 8; ++j) {
            ASSERT_EQ(std::uint8_t(lo >> (8 * j)), sc[j]) << t << " " << j;
            ASSERT_EQ(std::uint8_t(hi >> (8 * j)), m[j]) << t << " " << j;
        }
    }
}

TEST(QuantFormat, Q6_KHandBuilt) {
    // 6-bit codes L[i] = (7 i) mod 64, group scales g - 8, d = 0.5: value = 0.5 * sc * (L - 32).
    BlockQ6_K b;
    std::memset(&b, 0, sizeof(b));
    b.d = f32_to_fp16_scalar(0.5f);
    for (int g = 0; g < 16; ++g) b.scales[g] = std::int8_t(g - 8);
    for (int i = 0; i < 256; ++i) {
        const int L = (7 * i) % 64;
        const int h = i / 128, quarter = (i % 128) / 32, l = i % 32;
        std::uint8_t& ql = b.ql[64 * h + l + 32 * (quarter % 2)];
        ql |= std::uint8_t((L & 15) << (quarter < 2 ? 0 : 4));
        b.qh[32 * h + l] |= std::uint8_t((L >> 4) << (2 * quarter));
    }
    float y[256];
    dequantize(GgmlType::Q6_K, &b, y, 256);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], 0.5f * float((i / 16 - 8) * ((7 * i) % 64 - 32))) << i;
}

// ---- quantizers ----------------------------------------------------------------------------------

TEST(QuantFormat, Q8_0QuantizerRoundsHalfAwayFromZero) {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;  // d = 1
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 3.5f;
    x[4] = 0.49f;
    BlockQ8_0 b;
    quantize(GgmlType::Q8_0, x.data(), &b, 32);
    EXPECT_EQ(fp16_to_f32_scalar(b.d), 1.0f);
    EXPECT_EQ(b.qs[0], 127);
    EXPECT_EQ(b.qs[1], 3);  // roundf, not round-half-even
    EXPECT_EQ(b.qs[2], -3);
    EXPECT_EQ(b.qs[3], 4);
    EXPECT_EQ(b.qs[4], 0);
}

TEST(QuantFormat, Q4_0QuantizerSignTrickAndTruncation) {
    // x = j - 16: the largest magnitude is -16, so d = -16 / -8 = 2 and -16 maps to code 0;
    // code = min(15, trunc(x / 2 + 8.5)).
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[std::size_t(j)] = float(j - 16);
    BlockQ4_0 b;
    quantize(GgmlType::Q4_0, x.data(), &b, 32);
    EXPECT_EQ(fp16_to_f32_scalar(b.d), 2.0f);
    auto code = [&](int j) { return j < 16 ? b.qs[j] & 15 : b.qs[j - 16] >> 4; };
    EXPECT_EQ(code(0), 0);    // -16 -> 0.5 -> 0
    EXPECT_EQ(code(1), 1);    // -15 -> 1.0
    EXPECT_EQ(code(2), 1);    // -14 -> 1.5 -> 1 (truncation)
    EXPECT_EQ(code(17), 9);   // 1 -> 9.0
    EXPECT_EQ(code(31), 15);  // 15 -> 16.0, clamped
    // A positive extreme flips the sign of d.
    for (float& v : x) v = -v;
    quantize(GgmlType::Q4_0, x.data(), &b, 32);
    EXPECT_EQ(fp16_to_f32_scalar(b.d), -2.0f);
    EXPECT_EQ(code(0), 0);
}

TEST(QuantRoundTrip, ErrorWithinTypeBounds) {
    const std::int64_t n = 4096;
    auto x = test::gaussian(std::size_t(n), 11);
    for (std::size_t i = 0; i < x.size(); i += 97) x[i] *= 8;  // a few outliers
    for (GgmlType type : kAllTypes) {
        std::vector<std::uint8_t> q(ggml_row_bytes(type, n));
        quantize(type, x.data(), q.data(), n);
        const auto y = dequantized(type, q, n);
        double se = 0, sx = 0;
        for (std::int64_t b = 0; b < n / 32; ++b) {
            double amax = 0;
            for (int j = 0; j < 32; ++j) amax = std::max(amax, double(std::fabs(x[std::size_t(32 * b + j)])));
            for (int j = 0; j < 32; ++j) {
                const std::size_t i = std::size_t(32 * b + j);
                const double e = std::fabs(double(y[i]) - double(x[i]));
                se += e * e;
                sx += double(x[i]) * x[i];
                switch (type) {
                    case GgmlType::F32: ASSERT_EQ(y[i], x[i]); break;
                    case GgmlType::F16: ASSERT_LE(e, kF16RelErr * std::fabs(x[i]) + kF16AbsErr) << i; break;
                    case GgmlType::BF16: ASSERT_LE(e, kBf16RelErr * std::fabs(x[i])) << i; break;
                    case GgmlType::Q8_0: ASSERT_LE(e, kQ8_0MaxErr * amax) << i; break;
                    case GgmlType::Q4_0: ASSERT_LE(e, kQ4_0MaxErr * amax) << i; break;
                    default: break;
                }
            }
        }
        const double rel_rms = std::sqrt(se / sx);
        const double bound = type == GgmlType::Q8_0 ? kQ8_0Rms
                             : type == GgmlType::Q4_0 ? kQ4_0Rms
                             : type == GgmlType::Q4_K ? kQ4_KRms
                             : type == GgmlType::Q6_K ? kQ6_KRms
                                                      : kBf16RelErr;
        EXPECT_LE(rel_rms, bound) << tname(type);
        RecordProperty("rel_rms_" + tname(type), std::to_string(rel_rms));
    }
}

TEST(QuantRoundTrip, ConstantAndZeroBlocks) {
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
        for (float v : {0.0f, 1.5f, -3.0f}) {
            std::vector<float> x(256, v);
            std::vector<std::uint8_t> q(ggml_row_bytes(type, 256));
            quantize(type, x.data(), q.data(), 256);
            const auto y = dequantized(type, q, 256);
            for (int i = 0; i < 256; ++i) EXPECT_NEAR(y[std::size_t(i)], v, 0.02 * std::fabs(v) + 1e-7) << tname(type) << " v=" << v;
        }
    }
}

// ---- every SIMD level against ref ----------------------------------------------------------------

TEST(QuantSimd, DequantizeBitExactAcrossLevels) {
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16, GgmlType::BF16})
        for (std::int64_t n : {256, 768, 2304}) {
            auto data = make_weights(type, 1, n, 3);
            randomize_codes(type, data, 4);
            std::vector<float> ref(static_cast<std::size_t>(n));
            {
                test::SimdLevelGuard g(SimdLevel::ref);
                dequantize(type, data.data(), ref.data(), n);
            }
            for (SimdLevel level : supported_simd_levels()) {
                test::SimdLevelGuard g(level);
                std::vector<float> y(static_cast<std::size_t>(n));
                dequantize(type, data.data(), y.data(), n);
                EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0) << tname(type) << " " << simd_level_name(level);
            }
        }
}

TEST(QuantSimd, ActivationQuantizationIdenticalAcrossLevels) {
    for (std::int64_t n : {32, 96, 256, 1056}) {
        const auto x = test::gaussian(std::size_t(n), 7);
        quant::QuantizedX ref;
        quant::quantize_x_ref(x.data(), n, ref);
        for (SimdLevel level : supported_simd_levels())
            for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q6_K}) {
                if (type == GgmlType::Q6_K && n % 256) continue;
                quant::QuantizedX qx;
                quant::quant_kernels(level).prepare_x(type, x.data(), n, qx);
                for (std::int64_t b = 0; b < n / 32; ++b) {
                    ASSERT_EQ(qx.d[std::size_t(b)], ref.d[std::size_t(b)]) << simd_level_name(level) << " block " << b;
                    ASSERT_EQ(qx.s[std::size_t(b)], ref.s[std::size_t(b)]);
                    ASSERT_EQ(qx.s16[std::size_t(2 * b)], ref.s16[std::size_t(2 * b)]);
                }
                if (level != SimdLevel::avx512 || type != GgmlType::Q4_0) {  // natural order
                    EXPECT_EQ(std::memcmp(qx.q.data(), ref.q.data(), std::size_t(n)), 0) << simd_level_name(level);
                }
            }
    }
}

/// Column counts per block size: odd block counts, Q4_0 groups with 1-3 trailing blocks, and
/// float rows with masked tails.
std::vector<std::int64_t> test_cols(GgmlType type) {
    switch (block_of(type)) {
        case 1: return {1, 7, 16, 17, 63, 100, 269, 1000};
        case 32: return {32, 64, 96, 160, 224, 256, 416, 1056};
        default: return {256, 512, 768, 2816};
    }
}

TEST(QuantSimd, MatvecMatchesRefOnOddShapes) {
    const std::int64_t rows = 37;
    for (GgmlType type : kAllTypes)
        for (std::int64_t cols : test_cols(type)) {
            auto data = make_weights(type, rows, cols, std::uint64_t(cols));
            randomize_codes(type, data, 9);
            const WeightMatrix W{type, rows, cols, data.data()};
            const auto x = test::gaussian(std::size_t(cols), 5);
            const auto w = dequantized(type, data, rows * cols);
            std::vector<float> ref(static_cast<std::size_t>(rows));
            {
                test::SimdLevelGuard g(SimdLevel::ref);
                matvec(W, x.data(), ref.data(), 1);
            }
            const auto xq = quant::quantizes_x(type) ? quantized_x(x) : x;
            for (SimdLevel level : supported_simd_levels()) {
                test::SimdLevelGuard g(level);
                std::vector<float> y(static_cast<std::size_t>(rows));
                matvec(W, x.data(), y.data(), 1);
                for (std::int64_t r = 0; r < rows; ++r) {
                    double mag = 0;
                    for (std::int64_t i = 0; i < cols; ++i) mag += std::fabs(double(w[std::size_t(r * cols + i)]) * xq[std::size_t(i)]);
                    ASSERT_NEAR(y[std::size_t(r)], ref[std::size_t(r)], kSumOrderRel * mag + 1e-30)
                        << tname(type) << " cols=" << cols << " row " << r << " " << simd_level_name(level);
                }
            }
        }
}

// ---- matvec against a double dot ----------------------------------------------------------------

TEST(Matvec, MatchesDequantizedDoubleDotWithinActivationBound) {
    // With x quantized per block of 32 (step d_b = amax_b / 127), each x_i moves by at most d_b / 2,
    // so |y - W x| <= sum_i |w_i| d_b(i) / 2; against the quantized x itself only the float
    // summation order remains.
    const std::int64_t rows = 19;
    for (GgmlType type : kAllTypes)
        for (std::int64_t cols : {256, 1024}) {
            auto data = make_weights(type, rows, cols, 21);
            const WeightMatrix W{type, rows, cols, data.data()};
            auto x = test::gaussian(std::size_t(cols), 22);
            x[3] = 9.0f;  // an outlier widens its block's step
            const auto w = dequantized(type, data, rows * cols);
            const bool qx = quant::quantizes_x(type);
            const auto xq = qx ? quantized_x(x) : x;
            std::vector<float> y(static_cast<std::size_t>(rows));
            matvec(W, x.data(), y.data());
            for (std::int64_t r = 0; r < rows; ++r) {
                double exact = 0, on_xq = 0, mag = 0, bound = 0;
                for (std::int64_t i = 0; i < cols; ++i) {
                    const double wi = w[std::size_t(r * cols + i)];
                    exact += wi * x[std::size_t(i)];
                    on_xq += wi * xq[std::size_t(i)];
                    mag += std::fabs(wi * xq[std::size_t(i)]);
                    if (qx) {
                        double amax = 0;
                        for (int j = 0; j < 32; ++j) amax = std::max(amax, double(std::fabs(x[std::size_t(i / 32 * 32 + j)])));
                        bound += std::fabs(wi) * amax / 127 / 2;
                    }
                }
                EXPECT_NEAR(y[std::size_t(r)], on_xq, kSumOrderRel * mag) << tname(type) << " row " << r;
                EXPECT_NEAR(y[std::size_t(r)], exact, bound * 1.0001 + kSumOrderRel * mag) << tname(type) << " row " << r;
            }
        }
}

TEST(Matvec, ThreadCountDoesNotChangeResults) {
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::F16}) {
        const std::int64_t rows = 1201, cols = 1024;  // > 512 KB for Q4_0: threads engage
        const auto data = make_weights(type, rows, cols, 31);
        const WeightMatrix W{type, rows, cols, data.data()};
        const auto x = test::gaussian(std::size_t(cols), 32);
        std::vector<float> y1(static_cast<std::size_t>(rows));
        matvec(W, x.data(), y1.data(), 1);
        for (int nt : {2, 3, 7}) {
            std::vector<float> y(static_cast<std::size_t>(rows));
            matvec(W, x.data(), y.data(), nt);
            EXPECT_EQ(std::memcmp(y.data(), y1.data(), y.size() * 4), 0) << tname(type) << " threads=" << nt;
        }
    }
}

TEST(Matvec, DequantizeRowMatchesDequantize) {
    const std::int64_t rows = 5, cols = 512;
    for (GgmlType type : kAllTypes) {
        const auto data = make_weights(type, rows, cols, 41);
        const WeightMatrix W{type, rows, cols, data.data()};
        const auto all = dequantized(type, data, rows * cols);
        std::vector<float> row(static_cast<std::size_t>(cols));
        dequantize_row(W, 3, row.data());
        EXPECT_EQ(std::memcmp(row.data(), all.data() + 3 * cols, std::size_t(cols) * 4), 0) << tname(type);
    }
}

// ---- matmul -------------------------------------------------------------------------------------

/// Row r of dequantized W [rows][cols] times row i of X, in double, and the sum of the products'
/// magnitudes (the scale a float product's rounding error is judged against).
struct ExactDot {
    double value = 0, magnitude = 0;
};
ExactDot exact_dot(const std::vector<float>& w, const std::vector<float>& X, std::int64_t cols, std::int64_t r,
                   std::int64_t i) {
    ExactDot d;
    for (std::int64_t c = 0; c < cols; ++c) {
        const double p = double(w[std::size_t(r * cols + c)]) * X[std::size_t(i * cols + c)];
        d.value += p;
        d.magnitude += std::fabs(p);
    }
    return d;
}

TEST(Matmul, MatchesMatvecForSeveralBatchSizes) {
    const std::int64_t rows = 75, cols = 512;
    for (GgmlType type : kAllTypes) {
        const auto data = make_weights(type, rows, cols, 51);
        const WeightMatrix W{type, rows, cols, data.data()};
        const auto w = dequantized(type, data, rows * cols);
        for (std::int64_t n : {1, 3, 8, 17, 64}) {
            const auto X = test::gaussian(std::size_t(n * cols), std::uint64_t(52 + n));
            std::vector<float> Y(static_cast<std::size_t>(n * rows)), y(static_cast<std::size_t>(rows));
            matmul(W, X.data(), n, Y.data());
            const bool rows_path = quant::automatic_path(type, n) == quant::MatmulPath::rows;
            for (std::int64_t i = 0; i < n; ++i) {
                matvec(W, X.data() + i * cols, y.data());
                for (std::int64_t r = 0; r < rows; ++r) {
                    const float got = Y[std::size_t(i * rows + r)];
                    if (rows_path) {
                        ASSERT_EQ(got, y[std::size_t(r)]) << tname(type) << " n=" << n;
                        continue;
                    }
                    // gemm or invariant path: f32 dequantized W times f32 X (no activation quantization)
                    const auto [exact, mag] = exact_dot(w, X, cols, r, i);
                    ASSERT_NEAR(got, exact, 1e-5 * mag) << tname(type) << " n=" << n << " i=" << i << " r=" << r;
                    if (!quant::quantizes_x(type)) {
                        ASSERT_NEAR(got, y[std::size_t(r)], 2e-5 * mag);
                    }
                }
            }
        }
    }
}

/// matmul's rows path on `rows` x c weights of `type`, at every SIMD level, each batch size of
/// `batches` and 1-2 threads, is bit for bit matvec row by row.
void expect_rows_path_is_matvec(GgmlType type, std::int64_t rows, std::int64_t c, std::uint64_t seed,
                                std::initializer_list<std::int64_t> batches) {
    const std::int64_t max_n = std::max(batches);
    for (SimdLevel level : supported_simd_levels()) {
        test::SimdLevelGuard g(level);
        const auto data = make_weights(type, rows, c, seed);
        const WeightMatrix W{type, rows, c, data.data()};
        const auto X = test::gaussian(std::size_t(max_n * c), seed + 1);
        std::vector<float> alone(std::size_t(max_n * rows));
        for (std::int64_t i = 0; i < max_n; ++i) matvec(W, X.data() + i * c, alone.data() + i * rows, 1);
        for (std::int64_t n : batches)
            for (int threads : {1, 2}) {
                std::vector<float> Y(std::size_t(n * rows), -1.0f);
                quant::matmul_with(W, X.data(), n, Y.data(), threads, quant::MatmulPath::rows);
                ASSERT_EQ(std::memcmp(Y.data(), alone.data(), Y.size() * 4), 0)
                    << tname(type) << " c=" << c << " " << simd_level_name(level) << " n=" << n << " threads=" << threads;
            }
    }
}

TEST(Matmul, TheRowsPathIsMatvecBitForBitAtEveryBatchSizeAndThreadCount) {
    // The batch-invariant path the server decodes with: tiled over W's rows so a tile is reused
    // by every activation, yet each output must be exactly what matvec gives for that row alone.
    // 1100 rows: tiles (32 KB of W; 64 rows of float W) do not divide the rows, and 2 threads
    // split an odd tile count.
    for (GgmlType type : {GgmlType::F16, GgmlType::F32, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K})
        expect_rows_path_is_matvec(type, 1100, block_of(type) == 256 ? 512 : 160, 71, {1, 2, 5, 33, 70});
}

TEST(Matmul, TheRowsPathIsMatvecBitForBitOnLongRowsAndOddShapes) {
    // Float rows go through a blocked kernel with AVX-512 (2 rows x 3 activations, 1024-value chunks whose
    // accumulators wait between chunks): rows longer than a chunk, a chunk holding only the tail
    // (1025), a tail after whole chunks (2100), an odd row count (a lone last row) and activation
    // counts that leave 1 or 2 of a block of 3.
    for (GgmlType type : {GgmlType::F16, GgmlType::F32, GgmlType::BF16})
        for (std::int64_t c : {1025, 2048, 2100}) expect_rows_path_is_matvec(type, 131, c, 73, {2, 4, 7});
    // Q8_0 (blocked kernels too, 2 rows x 4 activations: with AVX-512 pairs of blocks into two
    // alternating accumulators, with AVX2 single blocks into two): a last chunk holding only the odd
    // block (1056, 2080), an even block count over two chunks (2048), activation counts that leave
    // 1-3 of a block of 4.
    for (std::int64_t c : {1056, 2048, 2080}) expect_rows_path_is_matvec(GgmlType::Q8_0, 131, c, 74, {2, 3, 5, 7});
    // Q4_0 (units of 4 blocks): the odd-block chunk, whole chunks, three blocks after the last unit (1120)
    for (std::int64_t c : {1056, 1120, 2048}) expect_rows_path_is_matvec(GgmlType::Q4_0, 131, c, 75, {2, 3, 5, 7});
    // Q4_K / Q6_K (1 row x 4 activations, super-blocks of 256 values): a last chunk of one
    // super-block (1280), two whole chunks (2048)
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K})
        for (std::int64_t c : {1280, 2048}) expect_rows_path_is_matvec(type, 131, c, 76, {2, 3, 5, 7});
}

/// The invariant path (the server's decode): at every SIMD level, each row of X gets the same bits
/// in a batch of n as alone, whatever n, its place in the batch and the threads; float types are
/// within 1e-5 of the exact product (their own kernel, one accumulator per output), the others are
/// matvec's (the rows path).
void expect_invariant_rows(GgmlType type, std::int64_t rows, std::int64_t c, std::uint64_t seed,
                           std::initializer_list<std::int64_t> batches) {
    const std::int64_t max_n = std::max(batches);
    const auto data = make_weights(type, rows, c, seed);
    const WeightMatrix W{type, rows, c, data.data()};
    const auto w = dequantized(type, data, rows * c);
    const auto X = test::gaussian(std::size_t(max_n * c), seed + 1);
    for (SimdLevel level : supported_simd_levels()) {
        test::SimdLevelGuard g(level);
        std::vector<float> alone(std::size_t(max_n * rows));
        for (std::int64_t i = 0; i < max_n; ++i)
            quant::matmul_with(W, X.data() + i * c, 1, alone.data() + i * rows, 1, quant::MatmulPath::invariant);
        for (std::int64_t i = 0; i < max_n; ++i) {
            std::vector<float> y(static_cast<std::size_t>(rows));
            matvec(W, X.data() + i * c, y.data(), 1);
            for (std::int64_t r = 0; r < rows; ++r) {
                const float got = alone[std::size_t(i * rows + r)];
                if (quant::quantizes_x(type)) {
                    ASSERT_EQ(got, y[std::size_t(r)]) << tname(type) << " " << simd_level_name(level);
                    continue;
                }
                const auto [exact, mag] = exact_dot(w, X, c, r, i);
                ASSERT_NEAR(got, exact, 1e-5 * mag) << tname(type) << " c=" << c << " " << simd_level_name(level);
            }
        }
        for (std::int64_t n : batches)
            for (int threads : {1, 2}) {
                // the batch begins anywhere in X: a row's place in the batch must not matter either
                const std::int64_t first = (max_n - n) / 2;
                std::vector<float> Y(std::size_t(n * rows), -1.0f);
                quant::matmul_with(W, X.data() + first * c, n, Y.data(), threads, quant::MatmulPath::invariant);
                ASSERT_EQ(std::memcmp(Y.data(), alone.data() + first * rows, Y.size() * 4), 0)
                    << tname(type) << " c=" << c << " " << simd_level_name(level) << " n=" << n << " threads=" << threads;
            }
    }
}

TEST(Matmul, TheInvariantPathGivesARowTheSameBitsInAnyBatch) {
    // 131 rows: blocks of 4 rows and tiles of 64 leave partial ones; batches that leave 1-5 of a
    // block of 6 activations; rows shorter than a 64-value step, with a masked tail, longer than a
    // 1024-value chunk, a chunk holding only the tail (1025), a tail after whole chunks (2100);
    // at AVX2 (8-value steps, 32 a pass) a row shorter than a pass with a tail of 5 (13).
    for (GgmlType type : {GgmlType::F16, GgmlType::F32, GgmlType::BF16})
        for (std::int64_t c : {13, 40, 160, 1025, 2100}) expect_invariant_rows(type, 131, c, 75, {2, 3, 5, 7, 12, 13, 33});
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K})
        expect_invariant_rows(type, 131, block_of(type) == 256 ? 512 : 160, 77, {2, 5, 13});
}

TEST(Matmul, ForcedPathsAgreeAndThreadsDoNotMatter) {
    const std::int64_t rows = 300, n = 17;  // 300 = 9 panels of 32 + 12 rows
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F32, GgmlType::BF16, GgmlType::F16}) {
        // f32/bf16/f16: 785 columns, not a multiple of 16 (the panel transpose's scalar tail; f16
        // rows are widened inside the transpose)
        const std::int64_t c = block_of(type) == 256 ? 768 : block_of(type) == 32 ? 800 : 785;
        const auto data = make_weights(type, rows, c, 61);
        const WeightMatrix W{type, rows, c, data.data()};
        const auto w = dequantized(type, data, rows * c);
        const auto X = test::gaussian(std::size_t(n * c), 62);
        std::vector<float> rows1(std::size_t(n * rows));
        quant::matmul_with(W, X.data(), n, rows1.data(), 2, quant::MatmulPath::rows);
        for (auto path : {quant::MatmulPath::sgemm, quant::MatmulPath::own})
            for (SimdLevel level : supported_simd_levels()) {
                test::SimdLevelGuard g(level);
                std::vector<float> a(std::size_t(n * rows)), b(a.size());
                quant::matmul_with(W, X.data(), n, a.data(), 1, path);
                quant::matmul_with(W, X.data(), n, b.data(), 3, path);
                EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << tname(type) << " " << simd_level_name(level);
                double num = 0, den = 0;
                for (std::int64_t i = 0; i < n; ++i)
                    for (std::int64_t r = 0; r < rows; ++r) {
                        const auto [exact, mag] = exact_dot(w, X, c, r, i);
                        const std::size_t at = std::size_t(i * rows + r);
                        ASSERT_NEAR(a[at], exact, 1e-5 * mag) << tname(type) << " " << simd_level_name(level) << " i=" << i << " r=" << r;
                        num += double(a[at] - rows1[at]) * (a[at] - rows1[at]);
                        den += double(a[at]) * a[at];
                    }
                // the rows path differs by the activation quantization only
                EXPECT_LT(std::sqrt(num / den), quant::quantizes_x(type) ? 0.01 : 1e-6) << tname(type);
            }
    }
}

// The caller's workspaces (what the Transformer passes) give the same bits as the call's own, on
// every path; warm, they hold what the first call grew and grow no further.
TEST(Matmul, WorkspacesGiveTheSameBitsAndStopGrowing) {
    const std::int64_t rows = 300, n = 17;
    // 2048 columns: the row-batch kernel keeps accumulators between its 1024-value chunks, in the workspace
    for (const std::int64_t c : {800, 2048}) {
        for (GgmlType type : {GgmlType::Q8_0, GgmlType::F16}) {
            const auto data = make_weights(type, rows, c, 63);
            const WeightMatrix W{type, rows, c, data.data()};
            const auto X = test::gaussian(std::size_t(n * c), 64);
            for (auto path :
                 {quant::MatmulPath::rows, quant::MatmulPath::sgemm, quant::MatmulPath::own, quant::MatmulPath::invariant}) {
                std::vector<float> own(std::size_t(n * rows)), given(own.size());
                quant::matmul_with(W, X.data(), n, own.data(), 2, path);
                ThreadWorkspaces threads;
                quant::matmul_with(W, X.data(), n, given.data(), 2, path, &threads);
                EXPECT_EQ(own, given) << tname(type);
                // Growth on one thread: with two, which thread takes which part varies from call to
                // call, so a thread's workspace may first grow on the second call (seen under ASan).
                ThreadWorkspaces ws;
                quant::matmul_with(W, X.data(), n, given.data(), 1, path, &ws);
                EXPECT_EQ(own, given) << tname(type);
                const std::size_t warm = ws.bytes();
                EXPECT_GT(warm, 0u) << tname(type);
                const quant::QuantKernels& k = quant::quant_kernels(active_simd_level());
                if (c > quant::kBatchChunk && type == GgmlType::F16) {  // the saved accumulators are counted
                    if (path == quant::MatmulPath::rows && k.dot_rows_batch) {
                        EXPECT_GE(warm, quant::batch_saved_floats<quant::BatchBlocks>(64) * sizeof(float));
                    }
                    if (path == quant::MatmulPath::invariant && k.dot_rows_invariant) {
                        EXPECT_GE(warm, quant::batch_saved_floats<quant::InvariantBlocks>(64) * sizeof(float));
                    }
                }
                quant::matmul_with(W, X.data(), n, given.data(), 1, path, &ws);
                EXPECT_EQ(own, given) << tname(type);
                EXPECT_EQ(ws.bytes(), warm) << tname(type);
            }
            std::vector<float> y1(static_cast<std::size_t>(rows)), y2(y1.size());
            matvec(W, X.data(), y1.data(), 1);
            Workspace w;
            matvec(W, X.data(), y2.data(), 1, &w);
            EXPECT_EQ(y1, y2) << tname(type);
        }
    }
}

// ---- bad input ----------------------------------------------------------------------------------

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(QuantErrors, UnsupportedTypeNamesIt) {
    std::vector<std::uint8_t> data(4096);
    std::vector<float> x(256), y(4);
    const WeightMatrix W{GgmlType::Q5_K, 4, 256, data.data()};
    EXPECT_NE(error_of([&] { matvec(W, x.data(), y.data()); }).find("Q5_K"), std::string::npos);
    EXPECT_NE(error_of([&] { matmul(W, x.data(), 1, y.data()); }).find("Q5_K"), std::string::npos);
    EXPECT_NE(error_of([&] { dequantize(GgmlType::Q4_1, data.data(), x.data(), 32); }).find("Q4_1"), std::string::npos);
    EXPECT_NE(error_of([&] { quantize(GgmlType::IQ2_XS, x.data(), data.data(), 256); }).find("IQ2_XS"), std::string::npos);
    EXPECT_NE(error_of([&] { quantize(GgmlType(99), x.data(), data.data(), 256); }).find("99"), std::string::npos);
}

TEST(QuantErrors, ColumnsNotAWholeNumberOfBlocks) {
    std::vector<std::uint8_t> data(4096);
    std::vector<float> x(300), y(4);
    EXPECT_THROW(matvec(WeightMatrix{GgmlType::Q4_0, 4, 48, data.data()}, x.data(), y.data()), Error);
    EXPECT_THROW(matvec(WeightMatrix{GgmlType::Q6_K, 4, 300, data.data()}, x.data(), y.data()), Error);
    EXPECT_THROW(matmul(WeightMatrix{GgmlType::Q8_0, 4, 40, data.data()}, x.data(), 5, y.data()), Error);
    EXPECT_THROW(dequantize(GgmlType::Q4_K, data.data(), x.data(), 128), Error);
    EXPECT_THROW(quantize(GgmlType::Q8_0, x.data(), data.data(), 33), Error);
}

TEST(QuantErrors, RowOutOfRangeAndMissingData) {
    std::vector<std::uint8_t> data(4096);
    std::vector<float> x(64);
    const WeightMatrix W{GgmlType::Q8_0, 4, 64, data.data()};
    EXPECT_THROW(dequantize_row(W, 4, x.data()), Error);
    EXPECT_THROW(dequantize_row(W, -1, x.data()), Error);
    EXPECT_THROW(matvec(WeightMatrix{GgmlType::Q8_0, 4, 64, nullptr}, x.data(), x.data()), Error);
}

}  // namespace
}  // namespace aqpim
