// Dense KV caches: attention equals a direct computation, causal limits, sequences, accounting.

#include <gtest/gtest.h>

#include <cmath>

#include "aqpim/error.h"
#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"
#include "support/random.h"

using namespace aqpim;

namespace {

/// softmax(scale q·k_t) v over t <= last, for one head: the definition.
std::vector<double> direct_attention(const float* q, const std::vector<float>& k, const std::vector<float>& v, int n_kv_heads,
                                     int ih, int hd, std::int64_t last, float scale) {
    std::vector<double> s(last + 1), out(hd, 0.0);
    double mx = -1e300, sum = 0.0;
    for (std::int64_t t = 0; t <= last; ++t) {
        double d = 0.0;
        for (int i = 0; i < hd; ++i) d += double(q[i]) * k[(t * n_kv_heads + ih) * hd + i];
        s[t] = scale * d;
        mx = std::max(mx, s[t]);
    }
    for (std::int64_t t = 0; t <= last; ++t) {
        const double p = std::exp(s[t] - mx);
        sum += p;
        for (int i = 0; i < hd; ++i) out[i] += p * v[(t * n_kv_heads + ih) * hd + i];
    }
    for (double& o : out) o /= sum;
    return out;
}

}  // namespace

TEST(KvCache, DenseAttentionMatchesDefinitionWithCausalRows) {
    const KvShape shape{2, 2, 16};
    const int n_tok = 37, group = 3, n_rows = 5;
    for (DenseKvType type : {DenseKvType::f32, DenseKvType::f16}) {
        auto cache = make_dense_kv_cache(shape, type);
        cache->add_sequence(3);
        const std::vector<float> k = test::gaussian(std::size_t(n_tok) * 2 * 16, 1), v = test::gaussian(k.size(), 2);
        // Append layer 1 in two pieces: positions continue.
        cache->append(1, 3, 20, k.data(), v.data());
        cache->append(1, 3, n_tok - 20, k.data() + 20 * 32, v.data() + 20 * 32);
        EXPECT_EQ(cache->n_tokens(3, 1), n_tok);
        EXPECT_EQ(cache->n_tokens(3, 0), 0);

        const std::vector<float> q = test::gaussian(std::size_t(n_rows) * group * 16, 3);
        const std::vector<std::int64_t> pos = {0, 5, 19, 20, 36};
        std::vector<float> out(q.size());
        KvQuery query{q.data(), group * 16, n_rows, group, pos.data(), 0.25f, out.data(), group * 16};
        cache->attend(1, 3, 1, query);
        const double tol = type == DenseKvType::f32 ? 1e-5 : 5e-3;
        for (int r = 0; r < n_rows; ++r)
            for (int g = 0; g < group; ++g) {
                const auto want = direct_attention(q.data() + (r * group + g) * 16, k, v, 2, 1, 16, pos[r], 0.25f);
                for (int i = 0; i < 16; ++i)
                    EXPECT_NEAR(out[(r * group + g) * 16 + i], want[i], tol) << "row " << r << " head " << g;
            }
    }
}

TEST(KvCache, SequencesAreIndependentAndAccounted) {
    const KvShape shape{3, 2, 8};
    auto cache = make_dense_kv_cache(shape, DenseKvType::f16);
    cache->add_sequence(0);
    cache->add_sequence(7);
    const std::vector<float> kv = test::gaussian(10 * 16, 4);
    for (int il = 0; il < 3; ++il) {
        cache->append(il, 0, 10, kv.data(), kv.data());
        cache->append(il, 7, 4, kv.data(), kv.data());
    }
    KvMemory m = cache->memory();
    EXPECT_EQ(m.n_tokens, 14);
    EXPECT_EQ(m.bytes, 14u * shape.elements_per_token() * 2);
    EXPECT_DOUBLE_EQ(m.bits_per_element(shape), 16.0);
    cache->remove_sequence(0);
    EXPECT_FALSE(cache->has_sequence(0));
    EXPECT_EQ(cache->memory().bytes, 4u * shape.elements_per_token() * 2);
    EXPECT_EQ(cache->n_tokens(7, 2), 4);
}

TEST(KvCache, MisuseIsAnError) {
    auto cache = make_dense_kv_cache(KvShape{1, 1, 4}, DenseKvType::f32);
    cache->add_sequence(1);
    EXPECT_THROW(cache->add_sequence(1), Error);
    EXPECT_THROW(cache->add_sequence(-2), Error);
    EXPECT_THROW(cache->remove_sequence(5), Error);
    EXPECT_THROW(cache->n_tokens(1, 1), Error);
    const std::vector<float> x(4, 1.0f);
    cache->append(0, 1, 1, x.data(), x.data());
    std::vector<float> out(4);
    const std::int64_t beyond = 1;
    KvQuery q{x.data(), 4, 1, 1, &beyond, 1.0f, out.data(), 4};
    EXPECT_THROW(cache->attend(0, 1, 0, q), Error);  // position 1 not stored yet
    EXPECT_THROW(cache->attend(0, 1, 1, q), Error);  // KV head out of range
    EXPECT_THROW(make_dense_kv_cache(KvShape{0, 1, 4}, DenseKvType::f32), Error);
}

TEST(KvCache, SequenceBytesEqualWhatDecodingThatFarHolds) {
    // For every scheme that can size a sequence: fill one sequence token by token and compare.
    const KvShape shape{2, 2, 64};
    for (const char* spec : {"f32", "f16", "int8", "int4:g=16", "q8_0", "q4_0", "kivi2:g=16,window=32"}) {
        auto cache = make_kv_cache(parse_kv_scheme(spec), shape);
        cache->add_sequence(0);
        const std::vector<float> kv = test::gaussian(2 * 64, 11);
        for (int t = 0; t < 150; ++t)
            for (int il = 0; il < 2; ++il) cache->append(il, 0, 1, kv.data(), kv.data());
        EXPECT_EQ(cache->sequence_bytes(150), cache->memory().bytes) << spec;
    }
}
