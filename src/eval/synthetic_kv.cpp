#include <algorithm>
#include <cmath>
#include <random>

#include "aqpim/error.h"
#include "aqpim/kv_capture.h"

namespace aqpim {

namespace {

void rope_neox(float* x, int D, int pos) {
    for (int i = 0; i < D / 2; ++i) {
        const double a = pos * std::pow(10000.0, -2.0 * i / D);
        const float x0 = x[i], x1 = x[i + D / 2];
        x[i] = float(x0 * std::cos(a) - x1 * std::sin(a));
        x[i + D / 2] = float(x1 * std::cos(a) + x0 * std::sin(a));
    }
}

// rows [n][D] = mean + low-rank(rank 8) + noise, with `n_outliers` channels scaled up.
std::vector<float> structured_rows(int n, int D, int n_outliers, std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    const int rank = 8;
    std::vector<float> basis(std::size_t(rank) * D), mean(D), gain(D, 1.0f), rows(std::size_t(n) * D);
    for (float& b : basis) b = g(rng) * 0.6f;
    for (float& m : mean) m = g(rng) * 0.3f;
    for (int o = 0; o < n_outliers; ++o) gain[(o * 37 + 5) % D] = 8.0f;
    for (int t = 0; t < n; ++t) {
        float z[8];
        for (float& v : z) v = g(rng);
        for (int d = 0; d < D; ++d) {
            float x = mean[d] + 0.3f * g(rng);
            for (int r = 0; r < rank; ++r) x += z[r] * basis[r * D + d];
            rows[std::size_t(t) * D + d] = x * gain[d];
        }
    }
    return rows;
}

}  // namespace

CapturedAttention synthetic_attention(int n_tokens, int n_head, int n_kv_head, int head_dim, std::uint64_t seed) {
    AQPIM_CHECK(n_tokens >= 1 && n_kv_head >= 1 && n_head % n_kv_head == 0 && head_dim >= 2 && head_dim % 2 == 0,
                "bad synthetic shape: {} tokens, {} heads, {} KV heads, head_dim {}", n_tokens, n_head, n_kv_head,
                head_dim);
    std::mt19937_64 rng(seed);
    CapturedAttention c;
    c.n_tokens = n_tokens;
    c.n_head = n_head;
    c.n_kv_head = n_kv_head;
    c.head_dim = head_dim;
    c.rope_pairs = RopePairs::neox;
    c.q.resize(std::size_t(n_tokens) * n_head * head_dim);
    c.k.resize(std::size_t(n_tokens) * n_kv_head * head_dim);
    c.v.resize(c.k.size());
    auto scatter = [&](std::vector<float>& dst, int n_heads, int ih, const std::vector<float>& rows, bool rope) {
        for (int t = 0; t < n_tokens; ++t) {
            float* x = dst.data() + (std::size_t(t) * n_heads + ih) * head_dim;
            std::copy_n(rows.data() + std::size_t(t) * head_dim, head_dim, x);
            if (rope) rope_neox(x, head_dim, t);
        }
    };
    for (int ih = 0; ih < n_kv_head; ++ih) {
        scatter(c.k, n_kv_head, ih, structured_rows(n_tokens, head_dim, 4, rng), true);
        scatter(c.v, n_kv_head, ih, structured_rows(n_tokens, head_dim, 0, rng), false);
    }
    // Queries scaled so that scaled scores have a spread of a few units, as in trained models.
    for (int ih = 0; ih < n_head; ++ih) {
        auto rows = structured_rows(n_tokens, head_dim, 0, rng);
        for (float& x : rows) x *= 0.05f;
        scatter(c.q, n_head, ih, rows, true);
    }
    return c;
}

}  // namespace aqpim
