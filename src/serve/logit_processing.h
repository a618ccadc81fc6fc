#pragma once
// What a request asks done to the logits before its sampler draws (docs/serve.md, "Sampling
// parameters"), in this order: OpenAI's logit_bias, the repetition penalty of vLLM and
// llama-server, OpenAI's frequency_penalty and presence_penalty, then top_k and min_p; then the
// sampler's temperature and top_p (JSON mode's mask, json_constraint.h, goes before all of them).
// Reported logprobs stay those of the unprocessed logits (as vLLM's). llama-server's order is an
// option (unit_temperature).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "serve/infill_sampler.h"

namespace aqpim::serve {

/// A dropped token's logit: finite (the sampler refuses non-finite logits as a sign of broken
/// weights), so far below any other that its probability is 0 at every temperature.
inline constexpr float kDroppedLogit = -1e30f;

struct LogitProcessing {
    std::vector<std::pair<std::int32_t, float>> logit_bias;  ///< added to those tokens' logits (-100..100)
    float frequency_penalty = 0.0f;   ///< minus this times a token's count among the generated tokens
    float presence_penalty = 0.0f;    ///< minus this once for a token among the generated tokens
    float repetition_penalty = 1.0f;  ///< a token of the window: logit / p if positive, logit * p if not
    std::int64_t repetition_window = -1;  ///< the last this many tokens of the sequence (-1: all of them)
    int top_k = 0;                    ///< keep the k largest logits (0: all)
    float min_p = 0.0f;               ///< drop tokens below min_p x the most likely one's probability (at the temperature)
    /// Never drawn: their logits are dropped before anything else (llama-server's logit_bias
    /// `false` and ignore_eos).
    std::vector<std::int32_t> banned;
    /// llama-server's order (its /completion and /infill): after top_k, the nucleus `top_p` here,
    /// then min_p, both on the probabilities at temperature 1 (llama.cpp's chain scales by the
    /// temperature last); the sampler's own top_p is then 1. False: vLLM's, min_p at the
    /// request's temperature and the nucleus in the sampler.
    bool unit_temperature = false;
    float top_p = 1.0f;               ///< unit_temperature only: the nucleus kept (1: all; 0: the most likely token)
    /// llama-server's infill sampler, last (infill_sampler.h); unit_temperature only.
    std::optional<InfillSampling> infill;

    /// Whether anything changes the logits.
    bool active() const;
    /// Empty when every field is in range, else what is not.
    std::string invalid_reason(int n_vocab) const;
};

/// Apply p to logits [n_vocab] of a sequence whose tokens are `tokens`, the generated ones from
/// `first_generated`, drawn at `temperature` (min_p's threshold; 0: greedy, min_p does nothing).
/// Dropped tokens get kDroppedLogit; the largest logit is never dropped.
void apply_logit_processing(const LogitProcessing& p, std::span<const std::int32_t> tokens, std::size_t first_generated,
                            float temperature, float* logits, int n_vocab);

}  // namespace aqpim::serve
