// Row-quantized KV caches (int8, int4, int:bits, q8_0, q4_0): codes, round trips, attention against
// the f32 dense cache, time consistency, accounting, budget, bad specs.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "aqpim/error.h"
#include "aqpim/kv_scalar.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/weights.h"
#include "kv/scalar_codec.h"
#include "kv/scalar_kv_test_util.h"

using namespace aqpim;
using namespace aqpim::kv;

namespace {

// Round-trip tolerances, per element, in units of the group's (or block's) stored scale:
/// int (asymmetric, min rounded down and scale up to f16): nearest level, never clipped.
constexpr double kAffineTolScales = 0.5;
/// q8_0: round(x / d) with the f32 d, decoded with d rounded to f16 (relative error <= 2^-11) times |q| <= 127.
constexpr double kQ8_0TolScales = 0.5 + 127.0 / 2048.0;
/// q4_0: the largest magnitude maps to -8 exactly; the opposite extreme can land one full step away
/// (llama.cpp clamps level 16 to 15), plus d's f16 rounding times |q| <= 8.
constexpr double kQ4_0TolScales = 1.0 + 8.0 / 2048.0;
/// Slack for f32 arithmetic in the bounds above, relative to the values' magnitude.
constexpr double kF32Slack = 1e-6;

// Attention output error (relative L2 vs f32 dense) on 300 tokens of head_dim 64, GQA group 2, for
// Gaussian data / synthetic data with outlier key channels: about 1.5x what was measured (int8 0.0060
// / 0.0033, q8_0 0.0068 / 0.0041, int4 0.099 / 0.058, q4_0 0.107 / 0.063). Relative errors look large
// on Gaussian data because attention there averages many values into a small output.
constexpr test::AttentionTolerance kAttentionTol[] = {
    {"int8", 0.009, 0.005},
    {"q8_0", 0.010, 0.006},
    {"int4", 0.15, 0.09},
    {"q4_0", 0.16, 0.10},
};

std::unique_ptr<KvCache> make(const std::string& spec, const KvShape& shape, const KvCacheOptions& options = {}) {
    return make_kv_cache(parse_kv_scheme(spec), shape, options);
}

float half_at(const std::uint8_t* p) {
    f16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_f32_scalar(h);
}

}  // namespace

TEST(ScalarKv, PackedBitsRoundTripEveryWidth) {
    for (int bits = 1; bits <= 8; ++bits)
        for (int n : {1, 7, 64, 333}) {
            const std::vector<std::uint8_t> q = test::random_codes(std::size_t(n), 1 << bits, std::uint64_t(bits * 1000 + n));
            std::vector<std::uint8_t> packed((std::size_t(n) * bits + 7) / 8 + 1, 0xAB), back(n);
            pack_bits(q.data(), n, bits, packed.data());
            EXPECT_EQ(packed.back(), 0xAB) << "wrote past (n * bits + 7) / 8 bytes";
            unpack_bits(packed.data(), n, bits, back.data());
            EXPECT_EQ(back, q) << "bits " << bits << " n " << n;
        }
}

TEST(ScalarKv, AffineGroupsRoundTripWithinHalfAScale) {
    // Offsets, a constant group and huge outliers: every element within half its group's stored scale.
    std::vector<float> x = test::gaussian(4 * 96, 11, 2.0f);
    for (int i = 0; i < 96; ++i) x[i] += 5.0f;          // row 0: offset
    for (int i = 96; i < 128; ++i) x[i] = 0.3f;          // row 1, first group: constant
    x[200] = 80.0f;                                       // row 2: an outlier
    for (int bits : {1, 2, 3, 4, 8})
        for (int g : {1, 8, 32, 96}) {
            const RowCodec c = RowCodec::affine_groups(96, bits, g);
            std::vector<std::uint8_t> rows(4 * c.row_bytes());
            std::vector<float> y(x.size());
            c.encode(x.data(), 4, 96, rows.data());
            c.decode(rows.data(), 4, y.data());
            for (int r = 0; r < 4; ++r)
                for (int i = 0; i < 96; ++i) {
                    const float scale = half_at(rows.data() + r * c.row_bytes() + (i / g) * 2);
                    const float v = x[r * 96 + i];
                    EXPECT_LE(std::fabs(y[r * 96 + i] - v), kAffineTolScales * scale + kF32Slack * (std::fabs(v) + 1))
                        << "bits " << bits << " g " << g << " row " << r << " i " << i;
                }
        }
}

TEST(ScalarKv, Q8_0AndQ4_0RowsAreLlamaCppBlocks) {
    const int hd = 128;
    const std::vector<float> x = test::gaussian(5 * hd, 12, 3.0f);
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0}) {
        const RowCodec c = RowCodec::ggml_blocks(hd, type);
        ASSERT_EQ(c.row_bytes(), ggml_row_bytes(type, hd));
        std::vector<std::uint8_t> rows(5 * c.row_bytes()), want(rows.size());
        std::vector<float> y(x.size()), want_y(x.size());
        c.encode(x.data(), 5, hd, rows.data());
        quantize(type, x.data(), want.data(), 5 * hd);  // llama.cpp's quantize_row_*_ref
        EXPECT_EQ(rows, want) << ggml_type_name(type);
        c.decode(rows.data(), 5, y.data());
        dequantize(type, want.data(), want_y.data(), 5 * hd);
        EXPECT_EQ(y, want_y);
        const double tol = type == GgmlType::Q8_0 ? kQ8_0TolScales : kQ4_0TolScales;
        const int block_bytes = type == GgmlType::Q8_0 ? 34 : 18;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const float d = std::fabs(half_at(rows.data() + (i / 32) * block_bytes));
            EXPECT_LE(std::fabs(y[i] - x[i]), tol * d + kF32Slack * std::fabs(x[i])) << ggml_type_name(type) << " " << i;
        }
    }
}

TEST(ScalarKv, Q8_0CacheAttendsOverLlamaCppDequantizedRows) {
    // The cache's attention equals dense f32 attention over rows that went through llama.cpp's blocks.
    const KvShape shape{1, 2, 64};
    const test::KvData d = test::gaussian_kv(shape, 300, 2, 21);
    for (const char* spec : {"q8_0", "q4_0"}) {
        const GgmlType type = std::string(spec) == "q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_0;
        test::KvData rounded = d;
        for (std::vector<float>* x : {&rounded.k, &rounded.v}) {
            std::vector<std::uint8_t> blocks(ggml_row_bytes(type, std::int64_t(x->size())));
            quantize(type, x->data(), blocks.data(), std::int64_t(x->size()));
            dequantize(type, blocks.data(), x->data(), std::int64_t(x->size()));
        }
        auto cache = make(spec, shape);
        auto ref = make_dense_kv_cache(shape, DenseKvType::f32);
        cache->add_sequence(0);
        ref->add_sequence(0);
        test::append_tokens(*cache, d, 0, 0, 300);
        test::append_tokens(*ref, rounded, 0, 0, 300);
        const std::vector<std::int64_t> pos = {0, 1, 127, 128, 255, 256, 299};
        for (int ih = 0; ih < 2; ++ih) {
            const auto a = test::attend_rows(*cache, d, 0, 0, ih, pos), b = test::attend_rows(*ref, d, 0, 0, ih, pos);
            for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << spec << " " << i;
        }
    }
}

TEST(ScalarKv, AttentionMatchesF32DenseWithinSchemeTolerance) {
    const KvShape shape{1, 2, 64};
    for (const test::AttentionTolerance& t : kAttentionTol) test::expect_attention_within(shape, t, 31);
    // More bits, less error: a test that would notice codes ignored or scales swapped.
    auto i8 = make("int8", shape), i4 = make("int4", shape), i2 = make("int:bits=2", shape);
    const test::KvData d = test::gaussian_kv(shape, 200, 2, 33);
    const double e8 = test::attention_error_vs_f32(*i8, d), e4 = test::attention_error_vs_f32(*i4, d),
                 e2 = test::attention_error_vs_f32(*i2, d);
    EXPECT_LT(e8 * 8, e4);
    EXPECT_LT(e4 * 2, e2);
}

TEST(ScalarKv, BatchedRowsEqualTokenByTokenDecode) {
    const KvShape shape{2, 2, 64};
    const int n = 290;  // crosses the 256-token decode tile
    const test::KvData d = test::gaussian_kv(shape, n, 3, 41);
    for (const char* spec : {"int8", "int4:g=16", "int:bits=3", "q8_0", "q4_0"}) {
        auto batch = make(spec, shape), step = make(spec, shape);
        batch->add_sequence(5);
        step->add_sequence(5);
        test::append_tokens(*batch, d, 5, 0, n);
        const std::vector<std::int64_t> all = test::positions(0, n - 1);
        for (int il = 0; il < 2; ++il)
            for (int ih = 0; ih < 2; ++ih) {
                const std::vector<float> got = test::attend_rows(*batch, d, il, 5, ih, all);
                std::vector<float> want;
                auto one = make(spec, shape);
                one->add_sequence(0);
                for (int t = 0; t < n; ++t) {
                    test::append_tokens(*one, d, 0, t, 1);
                    const auto o = test::attend_rows(*one, d, il, 0, ih, {t});
                    want.insert(want.end(), o.begin(), o.end());
                }
                ASSERT_EQ(got, want) << spec << " layer " << il << " head " << ih;
            }
    }
}

TEST(ScalarKv, MemoryMatchesHandCountedBytes) {
    // 2 layers x 2 KV heads x head_dim 64; 10 + 3 tokens in two sequences = 13 x 2 x 2 = 52 head rows
    // of keys and as many of values.
    const KvShape shape{2, 2, 64};
    struct Case {
        const char* spec;
        std::uint64_t codes, scales, mins;  // per head row
        double bits;
    };
    const Case cases[] = {
        {"int8", 64, 4, 4, 9.0},              // 8 + 2 * 16 / 32
        {"int4", 32, 4, 4, 5.0},              // 4 + 2 * 16 / 32
        {"int4:g=64", 32, 2, 2, 4.5},         // 4 + 2 * 16 / 64
        {"int:bits=3,g=32", 24, 4, 4, 4.0},   // 3 + 2 * 16 / 32
        {"int:bits=2,g=16", 16, 8, 8, 4.0},   // 2 + 2 * 16 / 16
        {"q8_0", 64, 4, 0, 8.5},              // (32 + 2) * 8 / 32
        {"q4_0", 32, 4, 0, 4.5},              // (16 + 2) * 8 / 32
    };
    const test::KvData d = test::gaussian_kv(shape, 10, 1, 51);
    for (const Case& c : cases) {
        auto cache = make(c.spec, shape);
        cache->add_sequence(0);
        cache->add_sequence(1);
        test::append_tokens(*cache, d, 0, 0, 10);
        test::append_tokens(*cache, d, 1, 0, 3);
        const KvMemory m = cache->memory();
        const std::uint64_t rows = 52;
        EXPECT_EQ(m.n_tokens, 13);
        EXPECT_EQ(m.bytes, 2 * rows * (c.codes + c.scales + c.mins)) << c.spec;
        EXPECT_DOUBLE_EQ(m.bits_per_element(shape), c.bits) << c.spec;
        for (const auto& [part, bytes] : m.parts) {
            const std::uint64_t want = part.find("codes") != std::string::npos    ? rows * c.codes
                                       : part.find("scales") != std::string::npos ? rows * c.scales
                                                                                  : rows * c.mins;
            EXPECT_EQ(bytes, want) << c.spec << " " << part;
        }
        EXPECT_EQ(m.parts.size(), c.mins ? 6u : 4u) << c.spec;
        cache->remove_sequence(0);
        EXPECT_EQ(cache->memory().bytes, 2 * 12 * (c.codes + c.scales + c.mins)) << c.spec;
    }
}

TEST(ScalarKv, BudgetRefusesAppendAndLeavesCacheUnchanged) {
    const KvShape shape{1, 2, 64};
    const std::uint64_t per_token = 2 * 2 * 36;  // q4_0: K and V, 2 heads, 2 blocks of 18 bytes
    KvCacheOptions options;
    options.memory_budget = 10 * per_token;
    auto cache = make("q4_0", shape, options);
    const test::KvData d = test::gaussian_kv(shape, 12, 1, 61);
    cache->add_sequence(0);
    test::append_tokens(*cache, d, 0, 0, 8);
    const std::vector<float> before = test::attend_rows(*cache, d, 0, 0, 1, {7});
    try {
        test::append_tokens(*cache, d, 0, 8, 3);
        FAIL() << "append beyond the budget succeeded";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("budget of 1440 bytes"), std::string::npos) << msg;
        EXPECT_NE(msg.find("needs 1584 bytes"), std::string::npos) << msg;
    }
    EXPECT_EQ(cache->n_tokens(0, 0), 8);
    EXPECT_EQ(cache->memory().bytes, 8 * per_token);
    EXPECT_EQ(test::attend_rows(*cache, d, 0, 0, 1, {7}), before);
    test::append_tokens(*cache, d, 0, 8, 2);  // exactly the budget
    EXPECT_EQ(cache->memory().bytes, 10 * per_token);
    cache->add_sequence(1);
    EXPECT_THROW(test::append_tokens(*cache, d, 1, 0, 1), Error);
    cache->remove_sequence(0);  // frees its share
    test::append_tokens(*cache, d, 1, 0, 10);
    EXPECT_EQ(cache->n_tokens(1, 0), 10);
}

TEST(ScalarKv, BadSpecsAndMisuseAreErrors) {
    const KvShape shape{1, 1, 64};
    for (const char* spec : {"int4:g=48", "int4:g=0", "int8:g=-32", "int4:wndow=3", "int4:bits=3", "int:bits=9",
                             "int:bits=0", "int8:g=x", "q8_0:g=32", "q4_0:foo=1"})
        EXPECT_THROW(make(spec, shape), Error) << spec;
    EXPECT_THROW(make("q4_0", KvShape{1, 1, 48}), Error);  // blocks of 32 along the head row
    EXPECT_THROW(make("q8_0", KvShape{1, 1, 16}), Error);
    EXPECT_THROW(make_scalar_kv_cache(parse_kv_scheme("f16"), shape), Error);
    try {
        make("int4:g=48", shape);
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("g=48 does not divide head_dim 64"), std::string::npos) << e.what();
    }

    auto cache = make("int4", shape);
    cache->add_sequence(1);
    EXPECT_THROW(cache->add_sequence(1), Error);
    EXPECT_THROW(cache->add_sequence(-1), Error);
    EXPECT_THROW(cache->remove_sequence(2), Error);
    EXPECT_THROW(cache->n_tokens(1, 1), Error);
    const test::KvData d = test::gaussian_kv(shape, 2, 1, 71);
    test::append_tokens(*cache, d, 1, 0, 1);
    EXPECT_THROW(test::attend_rows(*cache, d, 0, 1, 0, {1}), Error);  // position 1 not stored yet
    EXPECT_THROW(test::attend_rows(*cache, d, 0, 1, 1, {0}), Error);  // KV head out of range
}

TEST(ScalarKv, SchemeNamesAndCanonicalText) {
    const KvShape shape{1, 1, 64};
    EXPECT_EQ(make("int8", shape)->scheme(), "int8:g=32");
    EXPECT_EQ(make("int4:g=16", shape)->scheme(), "int4:g=16");
    EXPECT_EQ(make("int:bits=3", shape)->scheme(), "int:bits=3,g=32");
    EXPECT_EQ(make("q8_0", shape)->scheme(), "q8_0");
    EXPECT_EQ(make("q4_0", shape)->scheme(), "q4_0");
    for (const std::string& n : scalar_kv_scheme_names()) {
        EXPECT_TRUE(is_scalar_kv_scheme(n));
        const auto& all = kv_scheme_names();
        EXPECT_NE(std::find(all.begin(), all.end(), n), all.end()) << n << " missing from kv_scheme_names()";
    }
    EXPECT_FALSE(is_scalar_kv_scheme("f16"));
}
