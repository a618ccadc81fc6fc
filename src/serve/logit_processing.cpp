#include "serve/logit_processing.h"

#include "aqpim/sampler.h"
#include "serve/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

namespace aqpim::serve {

std::string LogitProcessing::invalid_reason(int n_vocab) const {
    for (const auto& [token, bias] : logit_bias) {
        if (token < 0 || token >= n_vocab) return fmt::format("logit_bias token {} outside [0, {})", token, n_vocab);
        if (!(bias >= -100.0f && bias <= 100.0f)) return fmt::format("logit_bias {} of token {} outside [-100, 100]", bias, token);
    }
    if (!(std::abs(frequency_penalty) <= 2.0f)) return fmt::format("frequency_penalty {} outside [-2, 2]", frequency_penalty);
    if (!(std::abs(presence_penalty) <= 2.0f)) return fmt::format("presence_penalty {} outside [-2, 2]", presence_penalty);
    if (!(repetition_penalty > 0.0f && repetition_penalty <= 10.0f))
        return fmt::format("repetition penalty {} outside (0, 10]", repetition_penalty);
    if (repetition_window < -1) return fmt::format("repetition window {} below -1", repetition_window);
    if (top_k < 0) return fmt::format("top_k {} is negative", top_k);
    if (!(min_p >= 0.0f && min_p <= 1.0f)) return fmt::format("min_p {} outside [0, 1]", min_p);
    if (!(top_p >= 0.0f && top_p <= 1.0f)) return fmt::format("top_p {} outside [0, 1]", top_p);
    if (top_p != 1.0f && !unit_temperature) return "top_p in the logit processing needs unit_temperature";
    for (const std::int32_t t : banned)
        if (t < 0 || t >= n_vocab) return fmt::format("banned token {} outside [0, {})", t, n_vocab);
    if (infill) {
        if (!unit_temperature) return "the infill sampler needs unit_temperature";
        if (!infill->vocabulary || std::int64_t(infill->vocabulary->size()) != n_vocab) return "the infill sampler needs the model's token texts";
        if (infill->ends.empty()) return "the infill sampler needs an end token";
        for (const std::int32_t t : infill->ends)
            if (t < 0 || t >= n_vocab) return fmt::format("infill end token {} outside [0, {})", t, n_vocab);
    }
    return {};
}

bool LogitProcessing::active() const {
    return !logit_bias.empty() || frequency_penalty != 0.0f || presence_penalty != 0.0f ||
           (repetition_penalty != 1.0f && repetition_window != 0) || top_k > 0 || min_p > 0.0f || !banned.empty() ||
           top_p < 1.0f || infill.has_value();
}

namespace {

/// Tokens of tokens[from..] with their counts.
std::unordered_map<std::int32_t, int> counts(std::span<const std::int32_t> tokens, std::size_t from) {
    std::unordered_map<std::int32_t, int> c;
    for (std::size_t i = from; i < tokens.size(); ++i) ++c[tokens[i]];
    return c;
}

/// Drop every token outside the smallest set of the most likely ones whose probability (at
/// temperature 1, over the tokens not dropped yet: theirs is 0) reaches top_p (at least one: top_p
/// 0 keeps the most likely, as llama.cpp's min_keep of 1).
void keep_nucleus(float top_p, float* logits, int n_vocab) {
    // Over the tokens not dropped yet (after top_k, a few), gathered: the others weigh nothing.
    thread_local Nucleus nucleus;  // buffers reused by each thread's requests
    thread_local std::vector<float> live;
    thread_local std::vector<std::int32_t> ids;
    live.clear();
    ids.clear();
    for (int i = 0; i < n_vocab; ++i)
        if (logits[i] > kDroppedLogit) live.push_back(logits[i]), ids.push_back(i);
    if (live.empty()) return;
    const std::size_t n_keep = nucleus.find(live.data(), int(live.size()), 1.0f, top_p);
    for (std::size_t i = n_keep; i < live.size(); ++i) live[std::size_t(nucleus.id(i))] = kDroppedLogit;
    for (std::size_t j = 0; j < ids.size(); ++j) logits[ids[j]] = live[j];
}

}  // namespace

void apply_logit_processing(const LogitProcessing& p, std::span<const std::int32_t> tokens, std::size_t first_generated,
                            float temperature, float* logits, int n_vocab) {
    const auto valid = [&](std::int32_t t) { return t >= 0 && t < n_vocab; };
    for (const std::int32_t t : p.banned)
        if (valid(t)) logits[t] = kDroppedLogit;
    for (const auto& [token, bias] : p.logit_bias)
        if (valid(token)) logits[token] += bias;
    if (p.repetition_penalty != 1.0f && p.repetition_window != 0) {
        const std::size_t window = p.repetition_window < 0 ? tokens.size() : std::size_t(p.repetition_window);
        for (const auto& entry : counts(tokens, tokens.size() - std::min(window, tokens.size()))) {
            if (!valid(entry.first)) continue;
            float& l = logits[entry.first];
            l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
        }
    }
    if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
        for (const auto& [token, n] : counts(tokens, std::min(first_generated, tokens.size())))
            if (valid(token)) logits[token] -= p.frequency_penalty * float(n) + p.presence_penalty;
    if (p.top_k > 0 && p.top_k < n_vocab) {
        thread_local std::vector<float> sorted;
        sorted.assign(logits, logits + n_vocab);
        std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<float>());
        const float kth = sorted[std::size_t(p.top_k - 1)];
        // Ties at the k-th value are kept (the set does not depend on how ids are ordered).
        for (int i = 0; i < n_vocab; ++i)
            if (logits[i] < kth) logits[i] = kDroppedLogit;
    }
    if (p.top_p < 1.0f) keep_nucleus(p.top_p, logits, n_vocab);
    if (p.min_p > 0.0f && (temperature > 0.0f || p.unit_temperature)) {
        // p_i / p_max = exp((l_i - l_max) / T) >= min_p  <=>  l_i >= l_max + T ln(min_p)
        const float mx = *std::max_element(logits, logits + n_vocab);
        const float threshold = mx + (p.unit_temperature ? 1.0f : temperature) * std::log(p.min_p);
        for (int i = 0; i < n_vocab; ++i)
            if (logits[i] < threshold) logits[i] = kDroppedLogit;
    }
    if (p.infill) apply_infill_sampler(*p.infill, logits, n_vocab, kDroppedLogit);
}

}  // namespace aqpim::serve
