#pragma once
// Shared by the scalar KV-cache tests: key/value/query data, filling a cache, attending many rows,
// and the error measure the tolerances are stated in.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_capture.h"
#include "aqpim/kv_scheme.h"
#include "support/random.h"

namespace aqpim::test {

/// Keys and values [n_tokens][n_kv_head][head_dim] of one layer, queries [n_tokens][n_kv_head * group][head_dim].
struct KvData {
    KvShape shape;
    int group = 1;
    int n_tokens = 0;
    std::vector<float> k, v, q;
};

/// Gaussian keys, values and queries (mean 0, sigma 1) for every layer.
inline KvData gaussian_kv(const KvShape& shape, int n_tokens, int group, std::uint64_t seed) {
    KvData d{shape, group, n_tokens, {}, {}, {}};
    const std::size_t n_values = std::size_t(n_tokens) * shape.n_kv_head * shape.head_dim;
    d.k = gaussian(n_values, seed);
    d.v = gaussian(n_values, seed + 1);
    d.q = gaussian(n_values * group, seed + 2);
    return d;
}

/// aqpim::synthetic_attention: low-rank keys with 4 outlier channels (gain 8), RoPE'd; scaled queries.
inline KvData outlier_kv(const KvShape& shape, int n_tokens, int group, std::uint64_t seed) {
    const CapturedAttention c =
        synthetic_attention(n_tokens, shape.n_kv_head * group, shape.n_kv_head, shape.head_dim, seed);
    return KvData{shape, group, n_tokens, c.k, c.v, c.q};
}

/// Append tokens [t0, t0 + n) of `d` to every layer of sequence seq.
inline void append_tokens(KvCache& cache, const KvData& d, int seq, int t0, int n) {
    const std::size_t row = std::size_t(d.shape.n_kv_head) * d.shape.head_dim;
    for (int il = 0; il < d.shape.n_layer; ++il) cache.append(il, seq, n, d.k.data() + t0 * row, d.v.data() + t0 * row);
}

/// Attention of the query rows at positions `pos` (each row's query is d.q at that position) for KV
/// head ih of layer il: [pos.size()][group][head_dim].
inline std::vector<float> attend_rows(const KvCache& cache, const KvData& d, int il, int seq, int ih,
                                      const std::vector<std::int64_t>& pos) {
    const int hd = d.shape.head_dim, n_q = d.shape.n_kv_head * d.group;
    std::vector<float> q(pos.size() * d.group * hd), out(q.size());
    for (std::size_t r = 0; r < pos.size(); ++r)
        for (int i = 0; i < d.group * hd; ++i)
            q[r * d.group * hd + i] = d.q[(std::size_t(pos[r]) * n_q + std::size_t(ih) * d.group) * hd + i];
    KvQuery query{q.data(), d.group * hd, int(pos.size()), d.group, pos.data(), 1.0f / std::sqrt(float(hd)),
                  out.data(), d.group * hd};
    cache.attend(il, seq, ih, query);
    return out;
}

/// Rows at positions first..last.
inline std::vector<std::int64_t> positions(std::int64_t first, std::int64_t last) {
    std::vector<std::int64_t> p;
    for (std::int64_t i = first; i <= last; ++i) p.push_back(i);
    return p;
}

/// ||a - b|| / ||b||.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num += double(a[i] - b[i]) * (a[i] - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / den);
}

/// Attention of `cache` (given empty) vs the f32 dense cache over all of d's tokens, appended at once
/// as sequence 0: relative error over every layer, KV head and row at positions first..n_tokens-1.
inline double attention_error_vs_f32(KvCache& cache, const KvData& d, int first = 0) {
    auto ref = make_dense_kv_cache(d.shape, DenseKvType::f32);
    ref->add_sequence(0);
    cache.add_sequence(0);
    append_tokens(*ref, d, 0, 0, d.n_tokens);
    append_tokens(cache, d, 0, 0, d.n_tokens);
    std::vector<float> got, want;
    const std::vector<std::int64_t> pos = positions(first, d.n_tokens - 1);
    for (int il = 0; il < d.shape.n_layer; ++il)
        for (int ih = 0; ih < d.shape.n_kv_head; ++ih) {
            const std::vector<float> a = attend_rows(cache, d, il, 0, ih, pos), b = attend_rows(*ref, d, il, 0, ih, pos);
            got.insert(got.end(), a.begin(), a.end());
            want.insert(want.end(), b.begin(), b.end());
        }
    return rel_error(got, want);
}

/// A scheme's attention error bounds (relative L2 vs f32 dense) on Gaussian and outlier-channel data.
struct AttentionTolerance {
    const char* spec;
    double gaussian, outlier;
};

/// The error of `t.spec` on 300 tokens (GQA group 2) of Gaussian data (seed) and of outlier-channel
/// data (seed + 1) within t's bounds; both recorded as test properties.
inline void expect_attention_within(const KvShape& shape, const AttentionTolerance& t, std::uint64_t seed) {
    auto a = make_kv_cache(parse_kv_scheme(t.spec), shape), b = make_kv_cache(parse_kv_scheme(t.spec), shape);
    const double e_gauss = attention_error_vs_f32(*a, gaussian_kv(shape, 300, 2, seed));
    const double e_outlier = attention_error_vs_f32(*b, outlier_kv(shape, 300, 2, seed + 1));
    EXPECT_LE(e_gauss, t.gaussian) << t.spec;
    EXPECT_LE(e_outlier, t.outlier) << t.spec;
    ::testing::Test::RecordProperty(std::string(t.spec) + "_gaussian", std::to_string(e_gauss));
    ::testing::Test::RecordProperty(std::string(t.spec) + "_outlier", std::to_string(e_outlier));
}

/// The time-consistency contract on d's tokens: arriving in batches of `steps` (each batch's rows
/// attending right after it) and arriving one at a time give every row's output bit for bit, and
/// the same bytes by part, in every layer and KV head.
inline void expect_batched_equals_token_by_token(const std::string& spec, const KvData& d, const std::vector<int>& steps) {
    const int n_layer = d.shape.n_layer, n_kv_heads = d.shape.n_kv_head;
    auto batched = make_kv_cache(parse_kv_scheme(spec), d.shape), single = make_kv_cache(parse_kv_scheme(spec), d.shape);
    batched->add_sequence(0);
    single->add_sequence(0);
    std::vector<std::vector<float>> got(std::size_t(n_layer) * n_kv_heads), want(got.size());  // [layer * n_kv_heads + head]
    int t0 = 0;
    for (int m : steps) {
        append_tokens(*batched, d, 0, t0, m);
        for (int il = 0; il < n_layer; ++il)
            for (int ih = 0; ih < n_kv_heads; ++ih) {
                const auto o = attend_rows(*batched, d, il, 0, ih, positions(t0, t0 + m - 1));
                got[il * n_kv_heads + ih].insert(got[il * n_kv_heads + ih].end(), o.begin(), o.end());
            }
        t0 += m;
    }
    ASSERT_EQ(t0, d.n_tokens);
    for (int t = 0; t < d.n_tokens; ++t) {
        append_tokens(*single, d, 0, t, 1);
        for (int il = 0; il < n_layer; ++il)
            for (int ih = 0; ih < n_kv_heads; ++ih) {
                const auto o = attend_rows(*single, d, il, 0, ih, {t});
                want[il * n_kv_heads + ih].insert(want[il * n_kv_heads + ih].end(), o.begin(), o.end());
            }
    }
    for (int il = 0; il < n_layer; ++il)
        for (int ih = 0; ih < n_kv_heads; ++ih)
            ASSERT_EQ(got[il * n_kv_heads + ih], want[il * n_kv_heads + ih]) << spec << " layer " << il << " head " << ih;
    EXPECT_EQ(batched->memory().parts, single->memory().parts) << spec;
}

}  // namespace aqpim::test
