#pragma once
// Response objects of llama-server's own /completion and /infill as aqpim's server sends them
// (docs/serve.md "llama-server's own endpoints"): a whole result, and a stream's chunks.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/text_stream.h"

namespace aqpim::serve {

/// How a result ended, in llama-server's words: "eos" (EOS, an end token or a constraint's end),
/// "word" (a stop string), "limit" (n_predict, n_indent or t_max_predict_ms), "none" (an error).
struct LlamaStop {
    const char* type = "none";
    std::string word;  ///< the stop string ("word")
};

/// What a result took: prompt tokens prefilled and generated, and their seconds.
struct LlamaTimings {
    int prompt_n = 0;
    double prompt_seconds = 0;
    int predicted_n = 0;
    double predicted_seconds = 0;
};
/// {"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n", ...}.
nlohmann::json llama_timings_json(const LlamaTimings& t);

/// `completion_probabilities` of these tokens: per token {id, token, bytes, logprob,
/// top_logprobs: [{id, token, bytes, logprob}]}; `piece(prev, token)` gives an alternative's text.
nlohmann::json llama_probs_json(const std::vector<TokenText>& tokens,
                                const std::function<std::string(std::int32_t, std::int32_t)>& piece);

/// The token ids of `tokens`.
std::vector<std::int32_t> token_ids_of(const std::vector<TokenText>& tokens);

/// A whole result (or a stream's last chunk, with `content` "" and no tokens): index, content,
/// tokens, id_slot, stop (true), model, tokens_predicted, tokens_evaluated, generation_settings,
/// prompt, has_new_line, truncated, stop_type, stopping_word, tokens_cached, timings; `extra`'s
/// members added (completion_probabilities).
struct LlamaResult {
    std::size_t index = 0;
    std::string content;
    bool has_new_line = false;  ///< the whole text holds a new line
    std::vector<std::int32_t> tokens;
    int id_slot = -1;
    std::string model;
    int tokens_evaluated = 0;
    nlohmann::json generation_settings;
    std::string prompt;
    LlamaStop stop;
    int tokens_cached = 0;
    LlamaTimings timings;
};
nlohmann::json llama_result_json(const LlamaResult& r);

/// Only the fields `paths` names ("a/b": b inside a, named "a/b"), as llama-server's
/// response_fields; a path that names nothing is left out. Empty: j whole.
nlohmann::json select_fields(const nlohmann::json& j, const std::vector<std::string>& paths);

/// "error: <json>\n\n": a stream's error event, as llama-server sends it.
std::string sse_error_event(const nlohmann::json& error);

}  // namespace aqpim::serve
