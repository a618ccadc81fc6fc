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
    nlohmann::json tool_calls;  ///< chat: the call the text is (message.tool_calls, content null); null: none
};

/// The non-streaming response: a choice per prompt, index in order.
nlohmann::json completion_json(const ResponseHeader& h, const std::vector<ChoiceText>& choices, const Usage& usage);
/// One chunk of a stream for choice `index`: text (chat: delta.content; `role_only`: a choice's
/// first chat chunk, delta {role: assistant}), finish_reason null unless given.
nlohmann::json stream_chunk_json(const ResponseHeader& h, std::size_t index, const std::string& text,
                                 const nlohmann::json& logprobs, const char* finish_reason, bool role_only = false);
/// A chat stream's chunk for choice `index` whose delta is a whole tool call (OpenAI's tool_calls
/// delta, each call with its index, id, type and function), with the logprobs of its text.
nlohmann::json stream_tool_calls_json(const ResponseHeader& h, std::size_t index, const nlohmann::json& tool_calls,
                                      const nlohmann::json& logprobs);
/// The tool call a finished chat text holds when it is one JSON object {"name": one of `names`,
/// "arguments": an object}: OpenAI's tool_calls array of it (`id` its id); null otherwise.
nlohmann::json tool_calls_of(const std::string& text, const std::vector<std::string>& names, const std::string& id);
/// The last chunk with stream_options.include_usage: no choices, the usage.
nlohmann::json stream_usage_json(const ResponseHeader& h, const Usage& usage);
/// "data: <json>\n\n" (invalid UTF-8 from byte tokens replaced, never an exception).
std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
/// JSON text of j (invalid UTF-8 replaced by U+FFFD).
std::string dump_json(const nlohmann::json& j);

}  // namespace aqpim::serve
