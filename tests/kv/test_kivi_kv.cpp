// KIVI cache: per-channel key blocks, the quantized-prefix rule, attention against f32 dense, the
// outlier-channel advantage over per-token codes, time consistency across window and group
// boundaries, accounting and budget.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "aqpim/error.h"
#include "aqpim/kv_scalar.h"
#include "aqpim/kv_scheme.h"
#include "kv/kivi_cache.h"
#include "kv/scalar_codec.h"
#include "kv/scalar_kv_test_util.h"

using namespace aqpim;
using namespace aqpim::kv;

namespace {

/// Attention output error (relative L2 vs f32 dense) of kivi2 with every token old enough quantized
/// (window 0), 300 tokens of head_dim 64, GQA group 2: about 1.5x what was measured (Gaussian 0.364,
/// outlier key channels 0.146).
constexpr double kKivi2GaussianTol = 0.55;
constexpr double kKivi2OutlierTol = 0.22;

std::unique_ptr<KvCache> make(const std::string& spec, const KvShape& shape, const KvCacheOptions& options = {}) {
    return make_kv_cache(parse_kv_scheme(spec), shape, options);
}

}  // namespace

TEST(Kivi, QuantizedPrefixRule) {
    const KiviParams p{2, 32, 128};
    EXPECT_EQ(kivi_quantized_tokens(0, p), 0);
    EXPECT_EQ(kivi_quantized_tokens(128, p), 0);
    EXPECT_EQ(kivi_quantized_tokens(159, p), 0);
    EXPECT_EQ(kivi_quantized_tokens(160, p), 32);
    EXPECT_EQ(kivi_quantized_tokens(200, p), 64);
    EXPECT_EQ(kivi_quantized_tokens(1024, p), 896);
    EXPECT_EQ(kivi_quantized_tokens(5, KiviParams{2, 4, 0}), 4);
}

TEST(Kivi, KeyBlocksRoundTripPerChannelWithinHalfAScale) {
    // A block [g][hd] with one outlier channel: each channel's error is bounded by its own scale, so
    // the ordinary channels keep a small error.
    const int g = 32, hd = 64;
    std::vector<float> x = test::gaussian(std::size_t(g) * hd, 81);
    for (int t = 0; t < g; ++t) x[t * hd + 5] = 40.0f + 8.0f * x[t * hd + 5];
    const AffineLayout L{hd, g, 2, 1, hd};
    std::vector<std::uint8_t> block(L.bytes());
    std::vector<float> y(x.size());
    affine_encode(L, x.data(), block.data());
    affine_decode(L, block.data(), y.data());
    for (int c = 0; c < hd; ++c) {
        f16_t h;
        std::memcpy(&h, block.data() + 2 * c, 2);
        const float scale = fp16_to_f32_scalar(h);
        for (int t = 0; t < g; ++t)
            EXPECT_LE(std::fabs(y[t * hd + c] - x[t * hd + c]), 0.5 * scale + 1e-6 * (std::fabs(x[t * hd + c]) + 1))
                << "channel " << c << " token " << t;
        if (c != 5) {
            EXPECT_LT(scale, 3.0f) << c;  // not stretched by channel 5
        }
    }
}

TEST(Kivi, AffineBlocksAreEachGroupsCodesPackedWhole) {
    // The stream the block codec writes (in chunks of codes) is the format: every group's codes, group
    // after group, packed as one bitstream after the scales and mins. Strided and contiguous groups,
    // widths that do and do not divide 8, groups that straddle the codec's chunks.
    for (const AffineLayout L : {AffineLayout{96, 7, 3, 1, 96}, AffineLayout{40, 13, 5, 13, 1}, AffineLayout{64, 32, 2, 1, 64},
                                 AffineLayout{3, 300, 8, 300, 1}, AffineLayout{600, 1, 1, 1, 1}}) {
        const std::int64_t n = std::int64_t(L.n_groups) * L.g;
        std::vector<float> x = test::gaussian(std::size_t(n), 83);
        std::vector<std::uint8_t> block(L.bytes()), want(L.bytes()), q(static_cast<std::size_t>(n));
        affine_encode(L, x.data(), block.data());
        for (int j = 0; j < L.n_groups; ++j) {
            f16_t scale, min;
            quantize_affine_group(x.data() + j * L.group_stride, L.elem_stride, L.g, L.bits, scale, min,
                                  q.data() + std::int64_t(j) * L.g);
            std::memcpy(want.data() + 2 * j, &scale, 2);
            std::memcpy(want.data() + L.scale_bytes() + 2 * j, &min, 2);
        }
        pack_bits(q.data(), n, L.bits, want.data() + L.scale_bytes() + L.min_bytes());
        EXPECT_EQ(block, want) << L.n_groups << " groups of " << L.g << " at " << L.bits << " bits";
        // and each value decodes to its group's min + scale * code
        std::vector<float> y(static_cast<std::size_t>(n));
        affine_decode(L, block.data(), y.data());
        for (int j = 0; j < L.n_groups; ++j) {
            f16_t scale, min;
            std::memcpy(&scale, block.data() + 2 * j, 2);
            std::memcpy(&min, block.data() + L.scale_bytes() + 2 * j, 2);
            for (int i = 0; i < L.g; ++i)
                ASSERT_EQ(y[std::size_t(j * L.group_stride + i * L.elem_stride)],
                          fp16_to_f32_scalar(min) + fp16_to_f32_scalar(scale) * float(q[std::size_t(j) * L.g + i]))
                    << "group " << j << " value " << i;
        }
    }
}

TEST(Kivi, AttentionMatchesF32DenseWithinTolerance) {
    const KvShape shape{1, 2, 64};
    auto a = make("kivi2:window=0", shape), b = make("kivi2:window=0", shape);
    const double e_gauss = test::attention_error_vs_f32(*a, test::gaussian_kv(shape, 300, 2, 91));
    const double e_outlier = test::attention_error_vs_f32(*b, test::outlier_kv(shape, 300, 2, 92));
    EXPECT_LE(e_gauss, kKivi2GaussianTol);
    EXPECT_LE(e_outlier, kKivi2OutlierTol);
    RecordProperty("kivi2_gaussian", std::to_string(e_gauss));
    RecordProperty("kivi2_outlier", std::to_string(e_outlier));

    // The f16 window removes error (rows whose whole context is in it are f16-exact: see
    // WindowRowsEqualTheF16Cache); at rows 250..299 the default window of 128 keeps 123-172 tokens
    // in f16 (measured: 0.104 vs 0.135 without).
    auto w = make("kivi2", shape), w0 = make("kivi2:window=0", shape);
    const test::KvData d = test::outlier_kv(shape, 300, 2, 93);
    EXPECT_LT(test::attention_error_vs_f32(*w, d, 250), 0.85 * test::attention_error_vs_f32(*w0, d, 250));
}

TEST(Kivi, WindowRowsEqualTheF16Cache) {
    const KvShape shape{1, 2, 32};
    const test::KvData d = test::gaussian_kv(shape, 100, 2, 94);
    auto kivi = make("kivi2:g=8,window=100", shape);
    auto f16 = make_dense_kv_cache(shape, DenseKvType::f16);
    kivi->add_sequence(0);
    f16->add_sequence(0);
    test::append_tokens(*kivi, d, 0, 0, 100);
    test::append_tokens(*f16, d, 0, 0, 100);
    const auto pos = test::positions(0, 99);
    for (int ih = 0; ih < 2; ++ih)
        EXPECT_EQ(test::attend_rows(*kivi, d, 0, 0, ih, pos), test::attend_rows(*f16, d, 0, 0, ih, pos));
}

TEST(Kivi, PerChannelKeysBeatPerTokenCodesOnOutlierChannels) {
    // Same bits (2) and group size (32), no window: KIVI's per-channel keys must beat per-token keys
    // where a few key channels carry outliers.
    const KvShape shape{1, 2, 128};
    const test::KvData d = test::outlier_kv(shape, 512, 2, 95);
    auto kivi = make("kivi2:window=0", shape), per_token = make("int:bits=2,g=32", shape);
    const double e_kivi = test::attention_error_vs_f32(*kivi, d), e_token = test::attention_error_vs_f32(*per_token, d);
    RecordProperty("kivi2", std::to_string(e_kivi));
    RecordProperty("int2_per_token", std::to_string(e_token));
    EXPECT_LT(e_kivi, 0.7 * e_token) << "kivi2 " << e_kivi << " per-token int2 " << e_token;
}

TEST(Kivi, BatchedRowsEqualTokenByTokenAcrossWindowAndGroupBoundaries) {
    // g=8, window=12: tokens quantize in groups of 8 once 12 newer ones exist. A prefill of 30 rows,
    // single tokens, a batch of 17, more single tokens and a batch that crosses the 256-token decode
    // tile must all give what token-by-token decoding gives.
    const KvShape shape{2, 2, 16};
    const test::KvData d = test::outlier_kv(shape, 300, 2, 96);
    for (const char* spec : {"kivi2:g=8,window=12", "kivi2:g=4,window=0", "kivi2:g=16,window=5"})
        test::expect_batched_equals_token_by_token(spec, d, {30, 1, 1, 1, 17, 1, 1, 9, 203, 36});
}

TEST(Kivi, MemoryMatchesHandCountedBytes) {
    // 1 layer x 2 KV heads x head_dim 64, g=32, window=128, 200 tokens: Q = floor(72 / 32) * 32 = 64
    // tokens quantized (2 key blocks per head), 136 in f16.
    const KvShape shape{1, 2, 64};
    auto cache = make("kivi2", shape);
    EXPECT_EQ(cache->scheme(), "kivi2:g=32,window=128");
    cache->add_sequence(0);
    const test::KvData d = test::gaussian_kv(shape, 200, 1, 97);
    test::append_tokens(*cache, d, 0, 0, 150);  // a batch, then decode steps: the state depends only on n
    for (int t = 150; t < 200; ++t) test::append_tokens(*cache, d, 0, t, 1);
    const KvMemory m = cache->memory();
    const std::vector<std::pair<std::string, std::uint64_t>> want = {
        {"key codes", 2 * 2 * (64 * 32 * 2 / 8)},  // heads x blocks x (channels x tokens x 2 bits)
        {"key scales f16", 2 * 2 * 64 * 2},        // one per channel per block
        {"key mins f16", 2 * 2 * 64 * 2},
        {"value codes", 2 * 64 * (64 * 2 / 8)},    // heads x tokens x (channels x 2 bits)
        {"value scales f16", 2 * 64 * 2 * 2},      // 2 groups of 32 channels per token
        {"value mins f16", 2 * 64 * 2 * 2},
        {"keys f16 window", 2 * 136 * 64 * 2},
        {"values f16 window", 2 * 136 * 64 * 2},
    };
    EXPECT_EQ(m.parts, want);
    EXPECT_EQ(m.n_tokens, 200);
    // Quantized part: keys 2 + 2 * 16 / 32 = 3 bits, values 2 + 2 * 16 / 32 = 3 bits; window 16 bits.
    EXPECT_DOUBLE_EQ(m.bits_per_element(shape), (64 * 3.0 + 136 * 16.0) / 200);
}

TEST(Kivi, BudgetRefusesAppendAndLeavesCacheUnchanged) {
    const KvShape shape{1, 1, 32};
    KvCacheOptions options;
    options.memory_budget = 2000;
    auto cache = make("kivi2:g=8,window=8", shape, options);
    cache->add_sequence(0);
    const test::KvData d = test::gaussian_kv(shape, 64, 1, 98);
    // Per key block of 8 tokens: 64 + 64 bytes of f16 scales and mins + 32 x 8 x 2 / 8 = 64 bytes of
    // codes = 192; per value row: 4 groups -> 8 + 8 + 8 = 24; per f16 token: 2 x 32 x 2 = 128.
    test::append_tokens(*cache, d, 0, 0, 16);  // Q = 8: 192 + 8 x 24 + 8 x 128 = 1408
    EXPECT_EQ(cache->memory().bytes, 1408u);
    const std::vector<float> before = test::attend_rows(*cache, d, 0, 0, 0, {15});
    EXPECT_THROW(test::append_tokens(*cache, d, 0, 16, 16), Error);  // Q = 24: 3 x 192 + 24 x 24 + 1024 = 2176
    EXPECT_EQ(cache->n_tokens(0, 0), 16);
    EXPECT_EQ(cache->memory().bytes, 1408u);
    EXPECT_EQ(test::attend_rows(*cache, d, 0, 0, 0, {15}), before);
    test::append_tokens(*cache, d, 0, 16, 8);  // Q = 16: 2 x 192 + 16 x 24 + 1024 = 1792
    EXPECT_EQ(cache->memory().bytes, 1792u);
}

TEST(Kivi, BadSpecsAreErrors) {
    const KvShape shape{1, 1, 64};
    for (const char* spec : {"kivi2:g=0", "kivi2:g=24", "kivi2:g=-8", "kivi2:window=-1", "kivi2:wndow=4",
                             "kivi2:bits=4", "kivi2:g=abc"})
        EXPECT_THROW(make(spec, shape), Error) << spec;
    EXPECT_NO_THROW(make("kivi2:g=64,window=0", shape));
}

TEST(Kivi, OldRowsReadWhatIsStillHeld) {
    // A row older than the last append reads the tokens quantized since as quantized (their f16
    // rows are gone): finite, and equal to a fresh row only where nothing changed.
    const KvShape shape{1, 1, 16};
    const test::KvData d = test::gaussian_kv(shape, 40, 1, 99);
    auto cache = make("kivi2:g=4,window=4", shape);
    cache->add_sequence(0);
    test::append_tokens(*cache, d, 0, 0, 10);
    const auto early = test::attend_rows(*cache, d, 0, 0, 0, {2});  // tokens 0..2 all f16
    test::append_tokens(*cache, d, 0, 10, 30);
    const auto late = test::attend_rows(*cache, d, 0, 0, 0, {2});   // tokens 0..2 now only coded
    for (float x : late) EXPECT_TRUE(std::isfinite(x));
    EXPECT_NE(early, late);
}
