#pragma once
// The body of llama-server's own POST /completion (/completions) and /infill, read into the
// parameters the OpenAI endpoints use plus what only these endpoints have (docs/serve.md
// "llama-server's own endpoints"): llama-server's field names and defaults, every field checked.
// A sampler aqpim does not have is accepted only at the value that turns it off.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/infill.h"
#include "serve/openai_fields.h"
#include "serve/openai_request.h"

namespace aqpim::serve {

struct LlamaCompletionParams {
    /// Sampling, stops, stream, constraints, processing (with llama-server's defaults: temperature
    /// 0.8, top_k 40, top_p 0.95 and min_p 0.05 at temperature 1, in llama-server's order).
    /// `prompts` is unused: see `prompts` below.
    CompletionParams params;
    /// Each prompt as llama-server takes it: text and token ids in any mix (BOS added when the
    /// prompt starts with text). /infill: at most one, the text after the prefix.
    std::vector<std::vector<PromptInput>> prompts;
    bool return_tokens = false;        ///< the generated token ids in `tokens`
    bool timings_per_token = false;    ///< `timings` in every streamed chunk
    std::vector<std::string> response_fields;  ///< only these fields ("a/b": nested) in a result
    bool ignore_eos = false;
    /// `samplers` holds llama-server's infill sampler (the server gives it the token texts and end
    /// tokens: LogitProcessing::infill).
    bool infill_sampler = false;
    int min_indent = 0;                        ///< n_indent (TextStream::set_min_indent)
    std::chrono::milliseconds max_predict{0};  ///< t_max_predict_ms
    // /infill
    std::string input_prefix, input_suffix;  ///< the code before and after the cursor
    std::vector<InfillFile> input_extra;  ///< other files of the project
    /// The settings as given and defaulted, for a result's generation_settings.
    nlohmann::json settings;
    std::string model;  ///< the request's `model`, echoed in its result ("": the server's alias)
};

/// Read a /completion (infill false) or /infill body. Unknown fields are refused (llama-server
/// ignores them); `tokenize` reads logit_bias texts. Throws ApiError 400 naming the field.
LlamaCompletionParams parse_llama_completion_request(const nlohmann::json& body, bool infill, const RequestLimits& limits,
                                                     const TokenizeFn& tokenize, std::string_view body_text = {});

}  // namespace aqpim::serve
