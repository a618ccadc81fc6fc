// Greedy and top-p sampling.

#include "aqpim/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"

namespace aqpim {

void SamplerParams::validate() const {
    AQPIM_CHECK(temperature >= 0.0f && std::isfinite(temperature), "sampler: temperature {} must be >= 0", temperature);
    AQPIM_CHECK(top_p > 0.0f && top_p <= 1.0f, "sampler: top-p {} must be in (0, 1]", top_p);
}

std::int32_t argmax(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) { params.validate(); }

Sampler::Sampler(const SamplerState& state) : Sampler(state.params) { rng_.discard(state.draws); }

void SamplerState::write(ByteWriter& out) const {
    out.f32(params.temperature);
    out.f32(params.top_p);
    out.u64(params.seed);
    out.u64(draws);
}

SamplerState SamplerState::read(ByteReader& in, std::uint64_t max_draws) {
    SamplerState s;
    s.params.temperature = in.f32("sampler temperature");
    s.params.top_p = in.f32("sampler top_p");
    s.params.seed = in.u64("sampler seed");
    s.draws = in.u64("sampler draws");
    try {
        s.params.validate();
    } catch (const Error& e) {
        in.fail(e.what());
    }
    if (s.draws > max_draws)
        in.fail(fmt::format("the sampler drew {} words, more than the {} its sequence allows", s.draws, max_draws));
    return s;
}

bool SamplerState::operator==(const SamplerState& o) const {
    // Bit equality: a state restored from bytes equals the state saved.
    return std::bit_cast<std::uint32_t>(params.temperature) == std::bit_cast<std::uint32_t>(o.params.temperature) &&
           std::bit_cast<std::uint32_t>(params.top_p) == std::bit_cast<std::uint32_t>(o.params.top_p) &&
           params.seed == o.params.seed && draws == o.draws;
}

std::int32_t Sampler::sample(const float* logits, int n_vocab) {
    // NaN logits would pick token 0 (or an arbitrary one) without a word: broken weights upstream.
    for (int i = 0; i < n_vocab; ++i)
        AQPIM_CHECK(std::isfinite(logits[i]), "sampler: logit {} is {}: the model's weights or the KV cache hold "
                    "non-finite values", i, logits[i]);
    if (params_.temperature == 0.0f) return argmax(logits, n_vocab);

    // Softmax at temperature T, then the nucleus: most probable tokens until top_p is covered.
    const float mx = logits[argmax(logits, n_vocab)];
    candidates_.resize(n_vocab);
    double total = 0.0;
    for (int i = 0; i < n_vocab; ++i) {
        const float p = std::exp((logits[i] - mx) / params_.temperature);
        candidates_[i] = {p, i};
        total += p;
    }
    // Most probable first (ties: lowest id), sorted only as far as the nucleus reaches: the top k
    // by partial sort, k growing 8x while the nucleus is not covered (the first k of a partial
    // sort are those of a full one, the order being total), so a 128K vocabulary is not sorted
    // whole for a nucleus of a few hundred tokens.
    const auto more_probable = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    double kept = 0.0;
    std::size_t n_keep = 0, n_sorted = 0;
    while (n_keep < candidates_.size() && (n_keep == 0 || kept < params_.top_p * total)) {
        if (n_keep == n_sorted) {
            n_sorted = std::min(candidates_.size(), std::max<std::size_t>(256, 8 * n_sorted));
            std::partial_sort(candidates_.begin() + n_keep, candidates_.begin() + n_sorted, candidates_.end(),
                              more_probable);
        }
        kept += candidates_[n_keep++].first;
    }

    const double u = std::uniform_real_distribution<double>(0.0, kept)(rng_);
    double acc = 0.0;
    for (std::size_t i = 0; i < n_keep; ++i) {
        acc += candidates_[i].first;
        if (u < acc) return candidates_[i].second;
    }
    return candidates_[n_keep - 1].second;
}

}  // namespace aqpim
