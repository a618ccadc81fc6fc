#pragma once
// Choosing the next token from logits: greedy at temperature 0, else temperature + nucleus (top-p)
// sampling with a seeded generator (same seed, same text).

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace aqpim {

class ByteWriter;
class ByteReader;

struct SamplerParams {
    float temperature = 0.8f;  ///< 0: greedy (argmax, lowest id on ties)
    float top_p = 0.95f;       ///< keep the smallest set of tokens whose probability reaches top_p
    std::uint64_t seed = 42;

    /// Throws aqpim::Error for a negative temperature or top_p outside (0, 1].
    void validate() const;
};

/// Everything a Sampler holds between calls, portably: its parameters and the number of 64-bit
/// words its std::mt19937_64 has produced since it was seeded. The C++ standard fixes that engine's
/// output sequence for a seed, so (seed, draws) is its state on every standard library (the
/// engine's operator<< text is not portable: libstdc++ writes its internal array and index, libc++
/// the standard's 312 words). Restoring replays `draws` words: about 2 ns each.
struct SamplerState {
    SamplerParams params;
    std::uint64_t draws = 0;

    /// 24 bytes, little-endian: f32 temperature, f32 top_p, u64 seed, u64 draws (docs/kv-state.md).
    static constexpr std::size_t kBytes = 24;
    void write(ByteWriter& out) const;
    /// Reads kBytes; invalid parameters or draws above max_draws are an aqpim::Error naming them.
    static SamplerState read(ByteReader& in, std::uint64_t max_draws);
    bool operator==(const SamplerState&) const;
};

/// The nucleus of a distribution given by logits: its most probable tokens, best first (ties: the
/// lowest id), until their probability reaches top_p (at least one token). Keeps its buffers
/// between calls.
class Nucleus {
public:
    /// Softmax of logits [n_vocab] at temperature (> 0), then the nucleus of top_p (in (0, 1]; 0
    /// keeps the most likely token). Returns its size.
    std::size_t find(const float* logits, int n_vocab, float temperature, float top_p);
    /// The i-th token of the nucleus, and its weight (the softmax's numerator).
    std::int32_t id(std::size_t i) const { return std::int32_t(keys_[i] & 0xFFFFFFFFu); }
    float weight(std::size_t i) const;
    double kept() const { return kept_; }  ///< the nucleus' weights, summed

private:
    /// keys_ into ascending order (from any permutation of it).
    void sort_keys();

    std::vector<std::uint64_t> keys_;     ///< per token: ~bits(weight) << 32 | id
    std::vector<std::uint64_t> scratch_;  ///< sort_keys' second buffer
    double kept_ = 0.0;
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& params);
    /// A sampler that continues exactly where the one `state` came from stopped.
    explicit Sampler(const SamplerState& state);
    /// Next token from logits [n_vocab].
    std::int32_t sample(const float* logits, int n_vocab);

    const SamplerParams& params() const { return params_; }
    SamplerState state() const { return {params_, rng_.draws()}; }

private:
    /// std::mt19937_64 that counts the words it produced.
    class CountingEngine {
    public:
        using result_type = std::mt19937_64::result_type;
        explicit CountingEngine(std::uint64_t seed) : engine_(seed) {}
        static constexpr result_type min() { return std::mt19937_64::min(); }
        static constexpr result_type max() { return std::mt19937_64::max(); }
        result_type operator()() { return ++draws_, engine_(); }
        void discard(std::uint64_t n) { engine_.discard(n), draws_ += n; }
        std::uint64_t draws() const { return draws_; }

    private:
        std::mt19937_64 engine_;
        std::uint64_t draws_ = 0;
    };

    SamplerParams params_;
    CountingEngine rng_;
    Nucleus nucleus_;
};

/// Index of the largest value (lowest index on ties).
std::int32_t argmax(const float* x, int n);

}  // namespace aqpim
