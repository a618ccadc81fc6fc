// The server's request parsing (`aqpim serve`, docs/serve.md): a POST body of /v1/completions or
// /v1/chat/completions through parse_request_json + parse_completion_request, then, for chat, the
// messages rendered by render_chat as the server renders them, and a refusal serialized as the
// server sends it (dump_json of ApiError::to_json); the bodies of /tokenize and /detokenize through
// their parsers; a model's finished answer read as tool calls (tool_calls_of: each call names a tool
// and its arguments are a JSON object; an answer read as calls with no content before them may be
// calls at each of its prefixes, as a stream holds it); llama-server's own /completion and /infill
// bodies through parse_llama_completion_request. Input: ENDPOINT SEP body, ENDPOINT one of
// `completions`, `chat`, `chat:FORMAT` (FORMAT a --chat-template name; unknown names: plain),
// `tokenize`, `detokenize`, `answer`, `completion` or `infill`.
// An ApiError with a 4xx status is the expected refusal of a bad body (the server's answer); any
// other status, exception or crash is a finding. Seeds: scripts/fuzz.sh.
#include <algorithm>
#include <cstdlib>

#include "fuzz_input.h"
#include "serve/chat_template.h"
#include "serve/llama_request.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace {

aqpim::serve::ChatFormat format_of(std::string_view endpoint) {
    using aqpim::serve::ChatFormat;
    const auto colon = endpoint.find(':');
    if (colon == std::string_view::npos) return ChatFormat::plain;
    try {
        return aqpim::serve::parse_chat_format(endpoint.substr(colon + 1));
    } catch (const aqpim::Error&) {
        return ChatFormat::plain;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim::serve;
    const auto parts = aqpim::fuzz::split_parts(data, size);
    const std::string_view endpoint = aqpim::fuzz::part(parts, 0);
    const bool chat = endpoint.substr(0, 4) == "chat";
    const ChatFormat format = format_of(endpoint);
    RequestLimits limits;
    limits.n_vocab = 512;  // stories260K's
    const ChatTokens tokens{"<s>", "</s>"};
    try {
        if (endpoint == "tokenize" || endpoint == "detokenize") {
            const nlohmann::json body = parse_request_json(std::string(aqpim::fuzz::part(parts, 1)));
            if (endpoint == "tokenize") (void)parse_tokenize_request(body);
            else (void)parse_detokenize_request(body, limits);
            return 0;
        }
        if (endpoint == "answer") {
            const std::string text(aqpim::fuzz::part(parts, 1));
            const std::vector<std::string> names = {"get_weather", "f"};
            const ToolCallsRead read = tool_calls_of(text, names, "call_0", true);
            if (read.calls.is_null()) return 0;
            for (const nlohmann::json& c : read.calls) {
                const std::string name = c.at("function").at("name");
                if (std::find(names.begin(), names.end(), name) == names.end()) std::abort();
                if (!nlohmann::json::parse(c.at("function").at("arguments").get<std::string>()).is_object()) std::abort();
            }
            if (read.content.empty())
                for (std::size_t k = 0; k <= text.size(); k += 1 + text.size() / 64)
                    if (!may_be_tool_calls(std::string_view(text).substr(0, k))) std::abort();
            return 0;
        }
        const std::string body(aqpim::fuzz::part(parts, 1));
        if (endpoint == "completion" || endpoint == "infill") {
            // A text's tokens: its bytes (every id below n_vocab).
            const TokenizeFn tokenize = [](const std::string& t) { return std::vector<std::int32_t>(t.begin(), t.end()); };
            const LlamaCompletionParams lp =
                parse_llama_completion_request(parse_request_json(body), endpoint == "infill", limits, tokenize, body);
            if (!lp.params.processing.invalid_reason(limits.n_vocab).empty()) std::abort();  // read, then the engine refuses it
            return 0;
        }
        const CompletionParams p = parse_completion_request(parse_request_json(body), chat, limits, body);
        if (chat) {
            aqpim::fuzz::expect_success_or_error([&] { (void)render_chat(format, p.messages, tokens); });
            (void)chat_stop_strings(format, tokens);
        }
    } catch (const ApiError& e) {
        if (e.status() < 400 || e.status() > 499) std::abort();  // a client's body is never a server error
        (void)dump_json(e.to_json());
    }
    return 0;
}
