#pragma once
// Deterministic random data for tests.

#include <cstdint>
#include <random>
#include <vector>

namespace aqpim::test {

inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float sigma = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

inline std::vector<std::uint8_t> random_codes(std::size_t n, int ksub, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::uint8_t> v(n);
    for (auto& c : v) c = std::uint8_t(rng() % unsigned(ksub));
    return v;
}

}  // namespace aqpim::test
