#pragma once
// The body of POST /v1/completions and /v1/chat/completions (OpenAI's wire format) read into
// typed parameters, every field checked (docs/serve.md, "Requests"). Anything wrong is an
// ApiError: the HTTP status and the OpenAI-style error object the server answers with.

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/chat_template.h"
#include "serve/grammar.h"
#include "serve/json_schema.h"
#include "serve/regex_dfa.h"
#include "serve/logit_processing.h"

namespace aqpim::serve {

/// An error a client caused (4xx) or one the server reports (5xx), as OpenAI's API reports it:
/// {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string param = "", std::string type = "");
    int status() const { return status_; }
    const std::string& param() const { return param_; }
    const std::string& type() const { return type_; }
    nlohmann::json to_json() const;

private:
    int status_;
    std::string param_, type_;
};

/// What a request may ask for.
struct RequestLimits {
    int n_vocab = 0;             ///< token ids in a prompt are below this
    /// Stop strings per request: OpenAI's limit is 4, vLLM and llama-server set none, and
    /// lm-evaluation-harness's generation tasks send their `until` list plus EOS (often more than 4).
    int max_stop = 16;
    std::size_t max_stop_bytes = 256;
    int max_top_logprobs = 20;
    int max_choices = 64;        ///< prompts x n in one request (a sequence each)
    /// tokens x (1 + alternatives) that the logprobs of one whole (not streamed) response may
    /// hold (it is built in memory: about 130 bytes each).
    std::size_t max_logprob_entries = std::size_t(1) << 20;
};

struct PromptInput {
    std::string text;
    std::vector<std::int32_t> tokens;
    bool is_tokens = false;
};

struct CompletionParams {
    bool chat = false;
    /// /v1/completions: one or more prompts (a choice each), as text or as token ids.
    std::vector<PromptInput> prompts;
    bool echo = false;                  ///< completions: the prompt goes before the completion (and its logprobs)
    /// completions: the text after the one written: each prompt is the prefix of a fill-in-the-middle
    /// prompt (infill.h); "": none
    std::string suffix;
    std::vector<ChatMessage> messages;  ///< /v1/chat/completions
    /// chat_template_kwargs.enable_thinking (vLLM's, llama-server's; Qwen3's template reads it):
    /// false asks a reasoning model to answer without reasoning. Absent: the server's default.
    std::optional<bool> enable_thinking;
    std::optional<int> max_tokens;      ///< absent: default_length
    /// Tokens generated without max_tokens: 16 (OpenAI's completions), the server's --n-predict
    /// within the context (chat, llama-server's /completion), or up to the context (n_predict -1).
    enum class DefaultLength : std::uint8_t { sixteen, server, context };
    DefaultLength default_length = DefaultLength::sixteen;
    std::string max_tokens_name = "max_tokens";  ///< the field a never-fitting length is blamed on
    bool report_eos = false;            ///< GenerationRequest::report_eos (llama-server's endpoints)
    float temperature = 1.0f;           ///< OpenAI's defaults
    float top_p = 1.0f;
    std::optional<std::uint64_t> seed;  ///< absent: the server draws one
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;         ///< stream_options.include_usage
    bool logprobs = false;              ///< completions: "logprobs": k (k >= 0); chat: "logprobs": true
    int top_logprobs = 0;               ///< alternatives per token
    int n = 1;                          ///< choices per prompt (seeds seed, seed + 1, ...)
    /// completions: sequences generated per prompt (>= n, seeds seed, seed + 1, ...), of which the
    /// n with the highest mean log probability per generated token are returned (OpenAI's rule)
    int best_of = 1;
    LogitProcessing processing;         ///< logit_bias, penalties, top_k, min_p
    int id_slot = -1;                   ///< aqpim (as llama-server): continue the sequence parked in this slot
    bool keep_slot = false;             ///< aqpim: park the finished sequence in its slot
    bool json_mode = false;             ///< response_format {"type": "json_object"} or "json_schema"
    std::shared_ptr<const JsonSchema> json_schema;  ///< response_format json_schema's schema (null: any object)
    std::shared_ptr<const RegexDfa> regex;  ///< structured_outputs regex or choice: the whole output matches it
    std::shared_ptr<const Grammar> grammar;  ///< a GBNF grammar (grammar, structured_outputs.grammar): the whole output matches it
    /// An output constraint holds the text (JSON mode or a schema, a regex or choice, a grammar).
    bool constrained() const { return json_mode || regex || grammar; }
    /// chat `tool_choice` (docs/serve.md "Tool calls"): none (no tools, or "none"), auto (the model
    /// may answer with a call), required (it must call one of the tools), named (that one).
    enum class ToolChoice : std::uint8_t { none, auto_call, required, named };
    ToolChoice tool_choice = ToolChoice::none;
    std::vector<std::string> tool_names;  ///< the functions a call may name
    bool parallel_tool_calls = true;      ///< an answer may hold several calls (auto); false: the first is kept
    /// vLLM's: the KV store shares stored prefixes only between requests with the same salt (a
    /// tenant's secret keeps its prompts' blocks, and their timing, to itself)
    std::string cache_salt;
    /// llama-server's: continue a cached sequence the prompt begins with, and leave this one cached
    /// (with the server's prompt cache on; docs/serve.md "Prompt cache").
    bool cache_prompt = true;
};

/// Read a request body. Unknown fields are refused as OpenAI refuses them ("Unrecognized request
/// argument supplied: X"); `suffix`, which we do not implement, is accepted only empty. `body_text`, when given, is the text `body` was parsed from: a
/// JSON schema's properties are then generated in the order written there (from `body` alone, in
/// name order: nlohmann::json sorts an object's members).
CompletionParams parse_completion_request(const nlohmann::json& body, bool chat, const RequestLimits& limits,
                                          std::string_view body_text = {});

/// POST /tokenize (vLLM's and llama-server's field names): the text and whether to add BOS.
struct TokenizeParams {
    std::string text;
    bool add_special = false;
    bool with_pieces = false;  ///< llama-server's: each token as {id, piece}
};
/// {"prompt": text, "add_special_tokens": b (default true)} (vLLM) or {"content": text,
/// "add_special": b (default false)} (llama-server); "model" is ignored. Throws ApiError 400.
TokenizeParams parse_tokenize_request(const nlohmann::json& body);
/// POST /detokenize: {"tokens": [ids below limits.n_vocab]}; "model" is ignored. Throws ApiError 400.
std::vector<std::int32_t> parse_detokenize_request(const nlohmann::json& body, const RequestLimits& limits);

/// Parse a body's text as JSON (nesting at most 64 levels); malformed: ApiError 400.
nlohmann::json parse_request_json(const std::string& body);

}  // namespace aqpim::serve
