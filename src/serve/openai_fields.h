#pragma once
// Reading a request body's fields (openai_request.cpp and openai_constraints.cpp): each helper
// returns the value or throws ApiError 400 naming the field and what is wrong with it.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/openai_request.h"

namespace aqpim::serve::fields {

[[noreturn]] void bad(const std::string& param, const std::string& message);
/// "null", "a boolean", "a number", "a string", "an array", "an object".
const char* type_name(const nlohmann::json& v);
/// A present, non-null field (nullptr if absent or null: OpenAI treats null as "not given").
const nlohmann::json* field(const nlohmann::json& body, const char* name);
double number(const nlohmann::json& v, const std::string& param, double lo, double hi);
std::int64_t integer(const nlohmann::json& v, const std::string& param, std::int64_t lo, std::int64_t hi);
bool boolean(const nlohmann::json& v, const std::string& param);
std::string string(const nlohmann::json& v, const std::string& param);

}  // namespace aqpim::serve::fields

namespace aqpim::serve {

/// Whose conventions a request body follows: OpenAI's (and vLLM's) endpoints, or llama-server's
/// own /completion and /infill.
enum class Dialect : std::uint8_t { openai, llama };
/// Text to token ids, without BOS (llama-server's logit_bias texts).
using TokenizeFn = std::function<std::vector<std::int32_t>(const std::string&)>;

/// logit_bias, the penalties, top_k and min_p into lp (docs/serve.md "Sampling parameters"),
/// over what lp holds (the dialect's defaults). llama: logit_bias may also be llama-server's
/// [[token id or text, bias or false], ...] (a text's tokens by `tokenize`; false: never drawn),
/// repeat_last_n needs no repeat_penalty, vLLM's repetition_penalty is not a field, any top_k <= 0 is off.
void read_processing(const nlohmann::json& body, const RequestLimits& limits, Dialect dialect, const TokenizeFn& tokenize,
                     LogitProcessing& lp);

}  // namespace aqpim::serve

namespace aqpim::serve {

/// The request body with its objects' members in the order the client wrote them (nlohmann::json
/// sorts them), read from its text once, when a schema needs it. With no text: the sorted order.
/// A body holding an object of more than kMaxMembers members is refused first: ordered_json finds
/// a member by a linear search, so reading such an object would cost the square of its size.
class OrderedBody {
public:
    static constexpr std::size_t kMaxMembers = 1024;

    OrderedBody(const nlohmann::json& body, std::string_view text);
    /// The value at `path` (object keys and array indices), members in the written order.
    nlohmann::ordered_json at(const std::vector<std::string>& path);

private:
    const nlohmann::ordered_json& whole();
    const nlohmann::json& body_;
    std::string_view text_;
    std::optional<nlohmann::ordered_json> parsed_;
};

/// llama-server's cache_prompt and vLLM's cache_salt into p (both dialects: docs/serve.md "Prompt cache").
void read_cache_fields(const nlohmann::json& body, CompletionParams& p);

/// A chat request's tools and tool_choice into p (openai_tools.cpp, docs/serve.md "Tool calls").
void read_tools(const nlohmann::json& body, OrderedBody& ordered, CompletionParams& p);

/// response_format, vLLM's structured_outputs and guided_* fields, and a chat request's tools and
/// tool_choice into p (json_mode, json_schema, regex, tool_choice, tool_names; the tools are
/// described to the model in a system message of p.messages). At most one of them constrains the
/// output. `body_text` as parse_completion_request takes it.
void read_output_constraints(const nlohmann::json& body, std::string_view body_text, CompletionParams& p);

/// An assistant message's tool_calls as the text the model writes for a call (one JSON object
/// {"name", "arguments"} per line), for the chat prompt. Throws ApiError 400 naming `param`.
std::string tool_calls_text(const nlohmann::json& tool_calls, const std::string& param);


}  // namespace aqpim::serve
