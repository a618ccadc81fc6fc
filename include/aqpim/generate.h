#pragma once
// Text generation: prefill the prompt, then decode one token at a time, streaming pieces.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/sampler.h"
#include "aqpim/tokenizer.h"
#include "aqpim/transformer.h"

namespace aqpim {

struct GenerateOptions {
    int n_predict = 128;          ///< tokens to generate
    SamplerParams sampler{};
    bool stop_at_eos = true;
    std::function<void(const std::string&)> on_piece;  ///< each generated token's text, as produced
};

struct GenerateResult {
    std::vector<std::int32_t> generated;
    std::string text;             ///< concatenated pieces of the generated tokens
    double prefill_seconds = 0.0;
    double decode_seconds = 0.0;
    std::uint64_t decode_bytes = 0;  ///< weights + KV read by the decode steps
    int n_prompt = 0;
    int n_decode_steps = 0;       ///< forward calls after the prefill
};

/// Generate after `prompt` (non-empty, BOS included if wanted) in sequence 0 of `cache`.
GenerateResult generate(Transformer& model, const Tokenizer& tokenizer, KvCache& cache,
                        const std::vector<std::int32_t>& prompt, const GenerateOptions& options);

struct SlotState;  // aqpim/kv_state.h

/// Continue a slot: sequence seq_id of `cache` holds slot.tokens[0, slot.n_cached); feed the rest
/// (at least one token) in one forward call, then sample and decode as above, drawing from
/// `sampler` (options.sampler is not used). Every sampled token is appended to slot.tokens, a
/// sampled EOS too (it ends the run unfed: n_cached stops one short of it); slot.n_cached becomes
/// what the cache holds. Saving the slot (with sampler.state()) and the sequence (aqpim/kv_state.h),
/// restoring and calling this again gives the tokens one uninterrupted call gives.
GenerateResult generate(Transformer& model, const Tokenizer& tokenizer, KvCache& cache, int seq_id, SlotState& slot,
                        Sampler& sampler, const GenerateOptions& options);

}  // namespace aqpim
