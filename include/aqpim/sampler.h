#pragma once
// Choosing the next token from logits: greedy at temperature 0, else temperature + nucleus (top-p)
// sampling with a seeded generator (same seed, same text).

#include <cstdint>
#include <random>
#include <vector>

namespace aqpim {

struct SamplerParams {
    float temperature = 0.8f;  ///< 0: greedy (argmax, lowest id on ties)
    float top_p = 0.95f;       ///< keep the smallest set of tokens whose probability reaches top_p
    std::uint64_t seed = 42;

    /// Throws aqpim::Error for a negative temperature or top_p outside (0, 1].
    void validate() const;
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& params);
    /// Next token from logits [n_vocab].
    std::int32_t sample(const float* logits, int n_vocab);

private:
    SamplerParams params_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, std::int32_t>> candidates_;
};

/// Index of the largest value (lowest index on ties).
std::int32_t argmax(const float* x, int n);

}  // namespace aqpim
