// Greedy and top-p sampling.

#include "aqpim/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <utility>

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

    const std::size_t n_keep = nucleus_.find(logits, n_vocab, params_.temperature, params_.top_p);
    const double u = std::uniform_real_distribution<double>(0.0, nucleus_.kept())(rng_);
    double acc = 0.0;
    for (std::size_t i = 0; i < n_keep; ++i) {
        acc += nucleus_.weight(i);
        if (u < acc) return nucleus_.id(i);
    }
    return nucleus_.id(n_keep - 1);
}

float Nucleus::weight(std::size_t i) const { return std::bit_cast<float>(~std::uint32_t(keys_[i] >> 32)); }

std::size_t Nucleus::find(const float* logits, int n_vocab, float temperature, float top_p) {
    // Most probable first, ties by lowest id: the ascending order of the 64-bit keys
    // (~bits(p) << 32 | id), p >= 0 so its bits order as its value.
    const float mx = logits[argmax(logits, n_vocab)];
    const std::size_t n = std::size_t(n_vocab);
    keys_.resize(n);
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        const float p = std::exp((logits[i] - mx) / temperature);
        keys_[i] = std::uint64_t(~std::bit_cast<std::uint32_t>(p)) << 32 | std::uint32_t(i);
        total += p;
    }
    // The first kPartial by a partial sort (a peaked distribution's nucleus is a few tokens); a
    // nucleus beyond them sorts everything by radix: a heap-based partial sort of the whole
    // vocabulary took 0.5 ms at 4096 tokens and 21 ms at 128256 (bench_sampler).
    constexpr std::size_t kPartial = 256;
    std::size_t n_sorted = std::min(n, kPartial);
    std::partial_sort(keys_.begin(), keys_.begin() + std::ptrdiff_t(n_sorted), keys_.end());
    kept_ = 0.0;
    std::size_t n_keep = 0;
    while (n_keep < n && (n_keep == 0 || kept_ < top_p * total)) {
        if (n_keep == n_sorted) {
            sort_keys();
            n_sorted = n;
        }
        kept_ += weight(n_keep++);
    }
    return n_keep;
}

void Nucleus::sort_keys() {
    // Back to id order (a partial sort moved them), then a stable LSD radix sort on the upper 32
    // bits, 11 bits per pass: equal probabilities keep their id order, so the result is the full
    // ascending order of the keys. A pass whose digit is the same for every key is skipped.
    const std::size_t n = keys_.size();
    scratch_.resize(n);
    for (const std::uint64_t k : keys_) scratch_[k & 0xFFFFFFFFu] = k;
    keys_.swap(scratch_);
    constexpr int kDigitBits = 11;
    constexpr std::size_t kBuckets = std::size_t(1) << kDigitBits;
    std::array<std::size_t, kBuckets> count;
    for (int shift = 32; shift < 64; shift += kDigitBits) {
        std::fill(count.begin(), count.end(), 0);
        for (const std::uint64_t k : keys_) ++count[(k >> shift) & (kBuckets - 1)];
        if (count[(keys_[0] >> shift) & (kBuckets - 1)] == n) continue;
        std::size_t at = 0;
        for (std::size_t& c : count) at += std::exchange(c, at);
        for (const std::uint64_t k : keys_) scratch_[count[(k >> shift) & (kBuckets - 1)]++] = k;
        keys_.swap(scratch_);
    }
}

}  // namespace aqpim
