#include "serve/openai_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "aqpim/error.h"
#include "aqpim/json_integer.h"
#include "aqpim/file_io.h"
#include "serve/openai_fields.h"

namespace aqpim::serve {

using nlohmann::json;

ApiError::ApiError(int status, std::string message, std::string param, std::string type)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), type_(std::move(type)) {
    if (type_.empty())
        type_ = status == 401 ? "authentication_error"
              : status == 404 ? "not_found_error"
              : status == 503 ? "unavailable_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
}

json ApiError::to_json() const {
    json e = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", status_}};
    if (!param_.empty()) e["param"] = param_;
    return {{"error", e}};
}

json parse_request_json(const std::string& body) {
    if (body.empty()) throw ApiError(400, "the request body is empty; expected a JSON object");
    json j;
    try {
        j = parse_json(body, "request body");
    } catch (const Error& e) {
        throw ApiError(400, e.what());
    }
    if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object, got " + json_excerpt(j));
    return j;
}

namespace fields {

void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, param + ": " + message, param);
}

const char* type_name(const json& v) {
    return v.is_null() ? "null" : v.is_boolean() ? "a boolean" : v.is_number() ? "a number" : v.is_string() ? "a string"
         : v.is_array() ? "an array" : "an object";
}

/// A present, non-null field (nullptr if absent or null: OpenAI treats null as "not given").
const json* field(const json& body, const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const std::string& param, double lo, double hi) {
    if (!v.is_number()) bad(param, fmt::format("expected a number, got {}", type_name(v)));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) bad(param, fmt::format("{} is outside [{}, {}]", json_excerpt(v), lo, hi));
    return x;
}

std::int64_t integer(const json& v, const std::string& param, std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer()) bad(param, fmt::format("expected an integer, got {}", json_excerpt(v)));
    const std::optional<std::int64_t> x = json_integer_in(v, lo, hi);
    if (!x) bad(param, fmt::format("{} is outside [{}, {}]", json_excerpt(v), lo, hi));
    return *x;
}

bool boolean(const json& v, const std::string& param) {
    if (!v.is_boolean()) bad(param, fmt::format("expected a boolean, got {}", type_name(v)));
    return v.get<bool>();
}

std::string string(const json& v, const std::string& param) {
    if (!v.is_string()) bad(param, fmt::format("expected a string, got {}", type_name(v)));
    return v.get<std::string>();
}

}  // namespace fields

namespace {

using namespace fields;

std::vector<std::int32_t> token_ids(const json& v, const RequestLimits& limits, const std::string& param) {
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < v.size(); ++i)
        ids.push_back(std::int32_t(integer(v[i], fmt::format("{}[{}]", param, i), 0, limits.n_vocab - 1)));
    return ids;
}

/// A string, an array of token ids, or an array of either (several prompts: a choice each).
void read_prompt(const json& v, const RequestLimits& limits, CompletionParams& p) {
    if (v.is_string()) {
        p.prompts.push_back({v.get<std::string>(), {}, false});
        return;
    }
    if (!v.is_array()) bad("prompt", fmt::format("expected a string or an array, got {}", type_name(v)));
    if (v.empty() || v[0].is_number()) {
        p.prompts.push_back({{}, token_ids(v, limits, "prompt"), true});
        return;
    }
    if (int(v.size()) > limits.max_choices)
        bad("prompt", fmt::format("{} prompts: at most {} per request", v.size(), limits.max_choices));
    const bool texts = v[0].is_string();
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string param = fmt::format("prompt[{}]", i);
        if (texts) {
            p.prompts.push_back({string(v[i], param), {}, false});
        } else {
            if (!v[i].is_array()) bad(param, fmt::format("expected an array of token ids, got {}", type_name(v[i])));
            p.prompts.push_back({{}, token_ids(v[i], limits, param), true});
        }
    }
}

std::string message_content(const json& v, const std::string& param) {
    if (v.is_string()) return v.get<std::string>();
    // [{"type": "text", "text": ...}, ...]: the text parts, concatenated.
    if (!v.is_array()) bad(param, fmt::format("expected a string or an array of text parts, got {}", type_name(v)));
    std::string text;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string pp = fmt::format("{}[{}]", param, i);
        if (!v[i].is_object()) bad(pp, fmt::format("expected an object, got {}", type_name(v[i])));
        const json* type = field(v[i], "type");
        if (!type || string(*type, pp + ".type") != "text") bad(pp + ".type", "only \"text\" parts are supported");
        const json* t = field(v[i], "text");
        if (!t) bad(pp + ".text", "missing");
        text += string(*t, pp + ".text");
    }
    return text;
}

void read_messages(const json& v, CompletionParams& p) {
    if (!v.is_array() || v.empty()) bad("messages", "expected a non-empty array of messages");
    bool after_result = false;  // the last message was a tool's result
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string param = fmt::format("messages[{}]", i);
        if (!v[i].is_object()) bad(param, fmt::format("expected an object, got {}", type_name(v[i])));
        for (const auto& [key, value] : v[i].items()) {
            // What a client echoes back of a response's message (a dumped message object): no prompt text.
            const bool echoed = key == "refusal" || key == "annotations" || key == "audio" || key == "reasoning_content" ||
                                (key == "function_call" && value.is_null());
            if (key != "role" && key != "content" && key != "name" && key != "tool_calls" && key != "tool_call_id" && !echoed)
                bad(param + "." + key, "unrecognized message field");
        }
        const json* role_field = field(v[i], "role");
        if (!role_field) bad(param + ".role", "missing");
        const std::string role = string(*role_field, param + ".role");
        const json* content = field(v[i], "content");
        const json* calls = field(v[i], "tool_calls");
        const json* call_id = field(v[i], "tool_call_id");
        if (calls && role != "assistant") bad(param + ".tool_calls", "only an assistant message holds tool calls");
        if (call_id && role != "tool") bad(param + ".tool_call_id", "only a tool message answers a call");
        if (!content && !calls) bad(param + ".content", "missing");
        std::string text = content ? message_content(*content, param + ".content") : "";
        if (calls) text += (text.empty() ? "" : "\n") + tool_calls_text(*calls, param + ".tool_calls");
        // A call's result is the user's turn in every format (docs/serve.md "Tool calls"), one turn
        // with the results and the user message around it (formats that alternate need that).
        const bool result = role == "tool";
        if (result) {
            const std::string id = call_id ? string(*call_id, param + ".tool_call_id") : "";
            text = "The result of the call" + (id.empty() ? std::string() : " " + id) + ":\n" + text;
        }
        if ((result || role == "user") && !p.messages.empty() && p.messages.back().role == "user" && (result || after_result)) {
            p.messages.back().content += "\n\n" + text;
        } else {
            p.messages.push_back({result ? "user" : role, std::move(text)});
        }
        after_result = result;
    }
}

void read_stop(const json& v, const RequestLimits& limits, CompletionParams& p) {
    auto add = [&](const json& s, const std::string& param) {
        std::string text = string(s, param);
        if (text.empty()) bad(param, "a stop string may not be empty");
        if (text.size() > limits.max_stop_bytes) bad(param, fmt::format("longer than {} bytes", limits.max_stop_bytes));
        p.stop.push_back(std::move(text));
    };
    if (v.is_string()) return add(v, "stop");
    if (!v.is_array()) bad("stop", fmt::format("expected a string or an array of strings, got {}", type_name(v)));
    if (int(v.size()) > limits.max_stop) bad("stop", fmt::format("at most {} stop strings", limits.max_stop));
    for (std::size_t i = 0; i < v.size(); ++i) add(v[i], fmt::format("stop[{}]", i));
}

/// Every key of the body `known` accepts, else 400 as OpenAI words it.
template <class Known>
void refuse_unknown_fields(const json& body, Known known) {
    for (const auto& item : body.items())
        if (!known(item.key())) throw ApiError(400, "Unrecognized request argument supplied: " + item.key(), item.key());
}

}  // namespace

namespace {

/// llama-server's logit_bias: [[token id or text, bias or false], ...] (a text: each of its tokens;
/// false: never drawn).
void read_llama_logit_bias(const json& v, const RequestLimits& limits, const TokenizeFn& tokenize, LogitProcessing& lp) {
    std::set<std::int32_t> seen;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string param = fmt::format("logit_bias[{}]", i);
        if (!v[i].is_array() || v[i].size() != 2) bad(param, "expected a pair [token id or text, bias or false]");
        std::vector<std::int32_t> ids;
        if (v[i][0].is_string()) {
            if (!tokenize) bad(param, "a text needs the model's tokenizer");
            ids = tokenize(v[i][0].get<std::string>());
            if (ids.empty()) bad(param + "[0]", "the text has no tokens");
        } else {
            ids.push_back(std::int32_t(integer(v[i][0], param + "[0]", 0, limits.n_vocab - 1)));
        }
        const bool ban = v[i][1].is_boolean() && !v[i][1].get<bool>();
        const float bias = ban ? 0.0f : float(number(v[i][1], param + "[1]", -100, 100));
        for (const std::int32_t id : ids) {
            if (!seen.insert(id).second) bad(param, fmt::format("token {} is biased twice", id));
            if (ban) lp.banned.push_back(id);
            else lp.logit_bias.emplace_back(id, bias);
        }
    }
}

}  // namespace

void read_processing(const json& body, const RequestLimits& limits, Dialect dialect, const TokenizeFn& tokenize,
                     LogitProcessing& lp) {
    const bool llama = dialect == Dialect::llama;
    if (const json* v = field(body, "logit_bias"); v && llama && v->is_array()) {
        read_llama_logit_bias(*v, limits, tokenize, lp);
    } else if (v) {
        if (!v->is_object()) bad("logit_bias", fmt::format("expected an object of token id: bias, got {}", type_name(*v)));
        std::set<std::int32_t> seen;
        for (const auto& [key, value] : v->items()) {
            const std::string param = "logit_bias." + key.substr(0, 32);
            std::int32_t id = -1;
            const char* end = key.data() + key.size();
            const auto [ptr, ec] = std::from_chars(key.data(), end, id);
            if (ec != std::errc() || ptr != end || id < 0 || id >= limits.n_vocab)
                bad(param, fmt::format("a key must be a token id in [0, {})", limits.n_vocab));
            if (!seen.insert(id).second) bad(param, fmt::format("token {} is biased twice", id));
            lp.logit_bias.emplace_back(id, float(number(value, param, -100, 100)));
        }
    }
    if (const json* v = field(body, "frequency_penalty")) lp.frequency_penalty = float(number(*v, "frequency_penalty", -2, 2));
    if (const json* v = field(body, "presence_penalty")) lp.presence_penalty = float(number(*v, "presence_penalty", -2, 2));
    const json* vllm = llama ? nullptr : field(body, "repetition_penalty");
    const json* penalty = field(body, "repeat_penalty");
    if (vllm && penalty) bad("repeat_penalty", "give one of repetition_penalty (vLLM) or repeat_penalty (llama-server)");
    if (vllm) lp.repetition_penalty = float(number(*vllm, "repetition_penalty", 0.01, 10));  // the whole sequence
    if (penalty) {
        lp.repetition_penalty = float(number(*penalty, "repeat_penalty", 0.01, 10));
        if (!llama) lp.repetition_window = 64;  // llama-server's repeat_last_n default
    }
    if (const json* v = field(body, "repeat_last_n")) {
        if (!penalty && !llama) bad("repeat_last_n", "needs repeat_penalty");
        lp.repetition_window = integer(*v, "repeat_last_n", -1, std::int64_t(1) << 30);
    }
    if (const json* v = field(body, "top_k"))
        lp.top_k = llama ? int(std::clamp<std::int64_t>(integer(*v, "top_k", std::numeric_limits<std::int32_t>::min(),
                                                                 std::numeric_limits<std::int32_t>::max()), 0, limits.n_vocab))
                         : std::max(0, int(integer(*v, "top_k", -1, limits.n_vocab)));
    if (const json* v = field(body, "min_p")) lp.min_p = float(number(*v, "min_p", 0, 1));
}

void read_cache_fields(const json& body, CompletionParams& p) {
    if (const json* v = field(body, "cache_prompt")) p.cache_prompt = boolean(*v, "cache_prompt");
    if (const json* v = field(body, "cache_salt")) {
        p.cache_salt = string(*v, "cache_salt");
        if (p.cache_salt.empty() || p.cache_salt.size() > 256) bad("cache_salt", "must be 1 to 256 bytes");
    }
}

CompletionParams parse_completion_request(const json& body, bool chat, const RequestLimits& limits,
                                          std::string_view body_text) {
    static const std::set<std::string> common = {
        "model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "user", "n",
        "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "id_slot", "keep_slot", "cache_salt",
        "cache_prompt", "top_k", "min_p", "repetition_penalty", "repeat_penalty", "repeat_last_n", "response_format",
        "structured_outputs", "guided_regex", "guided_choice", "guided_json", "guided_grammar", "grammar", "json_schema"};
    static const std::set<std::string> completions_only = {"prompt", "echo", "best_of", "suffix"};
    static const std::set<std::string> chat_only = {"messages", "top_logprobs", "max_completion_tokens", "tools",
                                                    "tool_choice", "parallel_tool_calls", "chat_template_kwargs"};
    refuse_unknown_fields(body, [&](const std::string& key) {
        return common.count(key) || (chat ? chat_only : completions_only).count(key);
    });

    CompletionParams p;
    p.chat = chat;
    if (chat) p.default_length = CompletionParams::DefaultLength::server;
    if (const json* v = field(body, "model")) (void)string(*v, "model");
    if (const json* v = field(body, "user")) (void)string(*v, "user");
    if (chat) {
        const json* m = field(body, "messages");
        if (!m) bad("messages", "missing (a chat request needs messages)");
        read_messages(*m, p);
        if (const json* v = field(body, "chat_template_kwargs")) {
            // Templates are rendered by hand (chat_template.h), not by Jinja: only the variable
            // the rendering reads is taken.
            if (!v->is_object()) bad("chat_template_kwargs", fmt::format("expected an object, got {}", type_name(*v)));
            for (const auto& [key, value] : v->items())
                if (key != "enable_thinking")
                    bad("chat_template_kwargs." + key, "unrecognized (templates are rendered without Jinja; enable_thinking is read)");
            if (const json* e = field(*v, "enable_thinking")) p.enable_thinking = boolean(*e, "chat_template_kwargs.enable_thinking");
        }
    } else {
        const json* v = field(body, "prompt");
        if (!v) bad("prompt", "missing");
        read_prompt(*v, limits, p);
    }
    const char* max_name = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    // 0 scores the prompt only (echo with logprobs, OpenAI's legacy completions).
    const bool scoring = !chat && field(body, "echo") && boolean(*field(body, "echo"), "echo") && field(body, "logprobs");
    p.max_tokens_name = max_name;
    if (const json* v = field(body, max_name))
        p.max_tokens = int(integer(*v, max_name, scoring ? 0 : 1, std::numeric_limits<int>::max()));
    if (const json* v = field(body, "temperature")) p.temperature = float(number(*v, "temperature", 0, 2));
    if (const json* v = field(body, "top_p")) p.top_p = float(number(*v, "top_p", 0, 1));
    if (const json* v = field(body, "seed"))
        p.seed = std::uint64_t(integer(*v, "seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
    if (const json* v = field(body, "stop")) read_stop(*v, limits, p);
    if (const json* v = field(body, "stream")) p.stream = boolean(*v, "stream");
    if (const json* v = field(body, "stream_options")) {
        if (!v->is_object()) bad("stream_options", fmt::format("expected an object, got {}", type_name(*v)));
        for (const auto& [key, value] : v->items())
            if (key != "include_usage") bad("stream_options." + key, "unrecognized");
        if (const json* u = field(*v, "include_usage")) p.include_usage = boolean(*u, "stream_options.include_usage");
        if (!p.stream) bad("stream_options", "is only allowed with stream: true");
    }
    if (chat) {
        if (const json* v = field(body, "logprobs")) p.logprobs = boolean(*v, "logprobs");
        if (const json* v = field(body, "top_logprobs")) {
            p.top_logprobs = int(integer(*v, "top_logprobs", 0, limits.max_top_logprobs));
            if (!p.logprobs) bad("top_logprobs", "needs logprobs: true");
        }
    } else if (const json* v = field(body, "logprobs")) {
        p.logprobs = true;
        p.top_logprobs = int(integer(*v, "logprobs", 0, limits.max_top_logprobs));
    }
    if (const json* v = field(body, "id_slot")) p.id_slot = int(integer(*v, "id_slot", -1, 1 << 20));
    if (const json* v = field(body, "keep_slot")) p.keep_slot = boolean(*v, "keep_slot");
    read_cache_fields(body, p);
    if (const json* v = field(body, "echo")) p.echo = boolean(*v, "echo");
    if (const json* v = field(body, "suffix"); v && !v->is_null()) {
        p.suffix = string(*v, "suffix");
        if (!p.suffix.empty() && p.echo) bad("suffix", "with echo: the prompt is the fill-in-the-middle one, not the text sent");
        if (!p.suffix.empty() && (p.id_slot >= 0 || p.keep_slot))
            bad("suffix", "fills a middle between a prompt and a suffix: it does not continue or park a sequence");
    }
    read_processing(body, limits, Dialect::openai, nullptr, p.processing);
    if (const json* v = field(body, "n")) p.n = int(integer(*v, "n", 1, limits.max_choices));
    p.best_of = p.n;
    if (const json* v = field(body, "best_of")) {
        p.best_of = int(integer(*v, "best_of", 1, limits.max_choices));
        if (p.best_of < p.n) bad("best_of", fmt::format("best_of = {} must be at least n = {}", p.best_of, p.n));
        if (p.best_of > p.n && p.stream) bad("best_of", "best_of > n cannot be streamed (the best are known at the end)");
    }
    const std::size_t n_choices = std::max<std::size_t>(1, p.prompts.size()) * std::size_t(p.best_of);
    if (n_choices > std::size_t(limits.max_choices))
        bad(p.best_of > p.n ? "best_of" : "n",
            fmt::format("{} prompts x {} = {} is {} choices: at most {} per request", p.prompts.size(),
                        p.best_of > p.n ? "best_of" : "n", p.best_of, n_choices, limits.max_choices));
    read_output_constraints(body, body_text, p);
    if ((p.constrained() || p.tool_choice != CompletionParams::ToolChoice::none) && (p.id_slot >= 0 || p.keep_slot))
        bad(p.id_slot >= 0 ? "id_slot" : "keep_slot",
            "an output constraint (response_format json_object or json_schema, structured_outputs, grammar, tools) does not continue or park a sequence");
    if (n_choices > 1 && (p.id_slot >= 0 || p.keep_slot))
        bad(p.id_slot >= 0 ? "id_slot" : "keep_slot", "takes one choice (one prompt, n = 1)");
    return p;
}

TokenizeParams parse_tokenize_request(const json& body) {
    static const std::set<std::string> known = {"prompt", "content", "add_special_tokens", "add_special", "with_pieces", "model"};
    refuse_unknown_fields(body, [](const std::string& key) { return known.count(key) > 0; });
    const json* prompt = field(body, "prompt");
    const json* content = field(body, "content");
    if (!prompt == !content) bad("prompt", "give the text as exactly one of prompt (vLLM) or content (llama-server)");
    TokenizeParams p;
    p.text = prompt ? string(*prompt, "prompt") : string(*content, "content");
    p.add_special = prompt != nullptr;  // each API's default
    if (const json* v = field(body, "add_special_tokens")) p.add_special = boolean(*v, "add_special_tokens");
    if (const json* v = field(body, "add_special")) p.add_special = boolean(*v, "add_special");
    if (const json* v = field(body, "with_pieces")) p.with_pieces = boolean(*v, "with_pieces");
    if (const json* v = field(body, "model")) (void)string(*v, "model");
    return p;
}

std::vector<std::int32_t> parse_detokenize_request(const json& body, const RequestLimits& limits) {
    refuse_unknown_fields(body, [](const std::string& key) { return key == "tokens" || key == "model"; });
    const json* v = field(body, "tokens");
    if (!v) bad("tokens", "missing");
    if (!v->is_array()) bad("tokens", fmt::format("expected an array of token ids, got {}", type_name(*v)));
    if (const json* m = field(body, "model")) (void)string(*m, "model");
    return token_ids(*v, limits, "tokens");
}

}  // namespace aqpim::serve
