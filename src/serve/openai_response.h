#pragma once
// Response objects of the OpenAI API as aqpim's server sends them (docs/serve.md, "Responses"):
// the whole completion, and the chunks of a stream (server-sent events).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/text_stream.h"

namespace aqpim::serve {

/// What every object of one response shares.
struct ResponseHeader {
    bool chat = false;
    std::string id;     ///< "cmpl-..." / "chatcmpl-..."
    std::string model;
    std::int64_t created = 0;  ///< unix seconds
};

struct Usage {
    int prompt_tokens = 0, completion_tokens = 0;
    int cached_tokens = 0;  ///< prompt tokens not prefilled (the prompt cache, the KV store): prompt_tokens_details
};

/// The logprobs object of a choice for `tokens` (completions: tokens / token_logprobs /
/// top_logprobs / text_offset from `text_offset`, null logprob and top for an unscored token; chat: content [{token, logprob, bytes,
/// top_logprobs}]). `piece(prev, token)` gives an alternative token's text after the token before it.
nlohmann::json logprobs_json(bool chat, const std::vector<TokenText>& tokens, std::size_t text_offset,
                             const std::function<std::string(std::int32_t, std::int32_t)>& piece);

/// One choice of a whole response.
struct ChoiceText {
    std::string text;
    const char* finish_reason = "stop";
    nlohmann::json logprobs;  ///< null: none asked for
    nlohmann::json tool_calls;  ///< chat: the calls the text holds (message.tool_calls; `text` the content before them); null: none
    std::string reasoning;      ///< chat: message.reasoning_content (reasoning.h; `text` the content after it); "": none
};

/// The non-streaming response: a choice per prompt, index in order.
nlohmann::json completion_json(const ResponseHeader& h, const std::vector<ChoiceText>& choices, const Usage& usage);
/// One chunk of a stream for choice `index`: text (chat: delta.content; `role_only`: a choice's
/// first chat chunk, delta {role: assistant}), finish_reason null unless given.
nlohmann::json stream_chunk_json(const ResponseHeader& h, std::size_t index, const std::string& text,
                                 const nlohmann::json& logprobs, const char* finish_reason, bool role_only = false);
/// A chat chunk of reasoning: delta.reasoning_content (reasoning.h).
nlohmann::json stream_reasoning_json(const ResponseHeader& h, std::size_t index, const std::string& reasoning,
                                     const nlohmann::json& logprobs);
/// A chat stream's chunk for choice `index` whose delta is a whole tool call (OpenAI's tool_calls
/// delta, each call with its index, id, type and function), with the logprobs of its text.
nlohmann::json stream_tool_calls_json(const ResponseHeader& h, std::size_t index, const nlohmann::json& tool_calls,
                                      const nlohmann::json& logprobs);
/// A finished chat answer read as tool calls (docs/serve.md "Tool calls"): `calls`, OpenAI's
/// tool_calls array (null: the answer is no call), and the content written before them.
struct ToolCallsRead {
    nlohmann::json calls;
    std::string content;
};
/// The calls a finished answer holds, in the forms tool-calling models write: the whole answer a
/// JSON call object ({"name": N, "arguments" or "parameters": A}, or {N: A}) or an array of them,
/// after Llama 3.1's `<|python_tag|>` or Mistral's `[TOOL_CALLS]`; or content followed by Hermes'
/// `<tool_call>CALL</tool_call>` blocks. Every N one of `names`, every A an object. Ids: `id`,
/// then `id`_1, `id`_2, ...; with `parallel` false only the first call is kept.
ToolCallsRead tool_calls_of(const std::string& text, const std::vector<std::string>& names, const std::string& id, bool parallel);
/// The calls of Hermes' tags alone in `text`: what a stream reads from the text it held after it
/// sent content (the other forms are whole answers, which content before them rules out).
ToolCallsRead tool_calls_in_tags(const std::string& text, const std::vector<std::string>& names, const std::string& id,
                                 bool parallel);
/// Whether an answer that begins with `text` may still be calls of those forms from its start
/// (a stream holds it until it cannot).
bool may_be_tool_calls(std::string_view text);
/// Whether `text`, a piece of an answer after content, may open Hermes' calls: it holds
/// `<tool_call>` or ends with the beginning of it.
bool may_open_tool_calls(std::string_view text);
/// The last chunk with stream_options.include_usage: no choices, the usage.
nlohmann::json stream_usage_json(const ResponseHeader& h, const Usage& usage);
/// "data: <json>\n\n" (invalid UTF-8 from byte tokens replaced, never an exception).
std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
/// JSON text of j (invalid UTF-8 replaced by U+FFFD).
std::string dump_json(const nlohmann::json& j);

}  // namespace aqpim::serve
