#pragma once
// Synthetic data for the PQ tests: x [n][D] row-major, deterministic for a seed.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace aqpim::test {

/// x [n][D]: i.i.d. N(0, 1), then channel d multiplied by channel_scale[d] (if given).
inline std::vector<float> gaussian(std::int64_t n, int D, std::uint32_t seed, const std::vector<float>& channel_scale = {}) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(std::size_t(n) * D);
    for (std::int64_t i = 0; i < n; ++i)
        for (int d = 0; d < D; ++d) x[i * D + d] = g(rng) * (channel_scale.empty() ? 1.0f : channel_scale[d]);
    return x;
}

/// x [n][D] = g [n][D] · A, A [D][D] random with entries N(0, 1/D) and row k scaled by 0.9^k:
/// correlated dims with a decaying spectrum (what PQ is good at). mix_seed fixes A, so train and
/// test sets drawn with the same mix_seed come from one distribution.
inline std::vector<float> correlated(std::int64_t n, int D, std::uint32_t seed, std::uint32_t mix_seed = 99) {
    std::mt19937 rng(mix_seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> A(std::size_t(D) * D);
    for (int k = 0; k < D; ++k)
        for (int d = 0; d < D; ++d) A[k * D + d] = g(rng) * std::pow(0.9f, float(k)) / std::sqrt(float(D));
    std::vector<float> z = gaussian(n, D, seed), x(std::size_t(n) * D, 0.0f);
    for (std::int64_t i = 0; i < n; ++i)
        for (int k = 0; k < D; ++k)
            for (int d = 0; d < D; ++d) x[i * D + d] += z[i * D + k] * A[k * D + d];
    return x;
}

inline double dot(const float* a, const float* b, int D) {
    double s = 0;
    for (int d = 0; d < D; ++d) s += double(a[d]) * b[d];
    return s;
}

inline double sq_dist(const float* a, const float* b, int D) {
    double s = 0;
    for (int d = 0; d < D; ++d) s += (double(a[d]) - b[d]) * (double(a[d]) - b[d]);
    return s;
}

}  // namespace aqpim::test
