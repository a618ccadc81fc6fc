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

}  // namespace aqpim
