// RoPE frequencies, with the scaling rules of llama.cpp and Hugging Face.

#include <cmath>
#include <numbers>

#include "aqpim/error.h"
#include "aqpim/transformer.h"

namespace aqpim {

std::vector<double> rope_inverse_frequencies(const ModelWeights& weights) {
    const ModelConfig& c = weights.config;
    const int n_pairs = c.head_dim / 2;
    std::vector<double> inv(n_pairs);
    for (int i = 0; i < n_pairs; ++i) inv[i] = std::pow(double(c.rope_theta), -2.0 * i / c.head_dim);

    const RopeScaling& s = c.rope_scaling;
    if (!weights.rope_freq_factors.empty()) {
        AQPIM_CHECK(int(weights.rope_freq_factors.size()) == n_pairs, "rope_freqs: {} factors, expected head_dim/2 = {}",
                    weights.rope_freq_factors.size(), n_pairs);
        for (int i = 0; i < n_pairs; ++i) {
            const float f = weights.rope_freq_factors[i];
            AQPIM_CHECK(std::isfinite(f) && f > 0.0f, "rope_freqs: factor {} is {}; expected a finite positive divisor", i,
                        f);
            inv[i] /= f;
        }
    } else if (s.kind == RopeScaling::Kind::llama3) {
        // Llama 3.1: long wavelengths slowed by `factor`, short ones kept, a smooth blend between.
        const double low_wavelen = s.original_context / s.low_freq_factor;
        const double high_wavelen = s.original_context / s.high_freq_factor;
        for (double& f : inv) {
            const double wavelen = 2.0 * std::numbers::pi / f;
            if (wavelen < high_wavelen) continue;
            if (wavelen > low_wavelen) {
                f /= s.factor;
            } else {
                const double smooth = (s.original_context / wavelen - s.low_freq_factor) /
                                      (s.high_freq_factor - s.low_freq_factor);
                f = (1.0 - smooth) * f / s.factor + smooth * f;
            }
        }
    } else if (s.kind == RopeScaling::Kind::linear) {
        for (double& f : inv) f /= s.factor;
    }
    return inv;
}

}  // namespace aqpim
