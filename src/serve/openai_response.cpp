#include "serve/openai_response.h"

#include <cmath>

namespace aqpim::serve {

using nlohmann::json;

namespace {

json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json header_json(const ResponseHeader& h, const char* object) {
    return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

json bytes_json(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

/// JSON has no -Infinity: a token of probability 0 (possible at temperature 0 only for the top-k
/// alternatives) is reported as OpenAI does, with -9999.
double finite(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

}  // namespace

json logprobs_json(bool chat, const std::vector<TokenText>& tokens, std::size_t text_offset,
                   const std::function<std::string(std::int32_t, std::int32_t)>& piece) {
    if (chat) {
        json content = json::array();
        for (const TokenText& t : tokens) {
            json top = json::array();
            for (const TokenLogprob& a : t.top) {
                const std::string s = piece(t.prev, a.token);
                top.push_back({{"token", s}, {"logprob", finite(a.logprob)}, {"bytes", bytes_json(s)}});
            }
            content.push_back({{"token", t.text}, {"logprob", finite(t.logprob)}, {"bytes", bytes_json(t.text)},
                               {"top_logprobs", top}});
        }
        return {{"content", content}};
    }
    json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    for (const TokenText& t : tokens) {
        toks.push_back(t.text);
        json top = json::object();
        for (const TokenLogprob& a : t.top) top[piece(t.prev, a.token)] = finite(a.logprob);
        lps.push_back(t.scored ? json(finite(t.logprob)) : json(nullptr));
        tops.push_back(t.scored ? top : json(nullptr));
        offsets.push_back(text_offset);
        text_offset += t.text.size();
    }
    return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json completion_json(const ResponseHeader& h, const std::vector<ChoiceText>& choices, const Usage& usage) {
    json j = header_json(h, h.chat ? "chat.completion" : "text_completion");
    j["choices"] = json::array();
    for (std::size_t i = 0; i < choices.size(); ++i) {
        const ChoiceText& c = choices[i];
        json choice = {{"index", i}, {"logprobs", c.logprobs}, {"finish_reason", c.finish_reason}};
        if (h.chat && !c.tool_calls.is_null())
            choice["message"] = {{"role", "assistant"}, {"content", c.text.empty() ? json(nullptr) : json(c.text)}, {"tool_calls", c.tool_calls}};
        else if (h.chat) choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        else choice["text"] = c.text;
        if (h.chat && !c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
        j["choices"].push_back(std::move(choice));
    }
    j["usage"] = usage_json(usage);
    return j;
}

json stream_chunk_json(const ResponseHeader& h, std::size_t index, const std::string& text, const json& logprobs,
                       const char* finish_reason, bool role_only) {
    json j = header_json(h, h.chat ? "chat.completion.chunk" : "text_completion");
    json choice = {{"index", index}, {"logprobs", logprobs},
                   {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
    if (h.chat) {
        json delta = json::object();
        if (role_only) delta = {{"role", "assistant"}, {"content", ""}};
        else if (!text.empty()) delta["content"] = text;
        choice["delta"] = delta;
    } else {
        choice["text"] = text;
    }
    j["choices"] = json::array({choice});
    return j;
}

json stream_reasoning_json(const ResponseHeader& h, std::size_t index, const std::string& reasoning, const json& logprobs) {
    json j = header_json(h, "chat.completion.chunk");
    j["choices"] = json::array({{{"index", index}, {"logprobs", logprobs}, {"finish_reason", nullptr},
                                 {"delta", {{"reasoning_content", reasoning}}}}});
    return j;
}

json stream_tool_calls_json(const ResponseHeader& h, std::size_t index, const json& tool_calls, const json& logprobs) {
    json calls = json::array();
    for (std::size_t k = 0; k < tool_calls.size(); ++k) {
        json c = tool_calls[k];
        c["index"] = k;
        calls.push_back(std::move(c));
    }
    json j = header_json(h, "chat.completion.chunk");
    j["choices"] = json::array({{{"index", index}, {"logprobs", logprobs}, {"finish_reason", nullptr}, {"delta", {{"tool_calls", calls}}}}});
    return j;
}

json stream_usage_json(const ResponseHeader& h, const Usage& usage) {
    json j = header_json(h, h.chat ? "chat.completion.chunk" : "text_completion");
    j["choices"] = json::array();
    j["usage"] = usage_json(usage);
    return j;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace aqpim::serve
