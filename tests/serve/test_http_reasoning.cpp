// Reasoning over HTTP (--reasoning-format deepseek, docs/serve.md "Reasoning"): an answer's
// <think>...</think> comes back as message.reasoning_content, streamed as delta.reasoning_content
// before the content, the same text either way; with the format none it is content. An output
// constraint holds after the reasoning; a template that opens the reasoning itself starts the
// answer in it; chat_template_kwargs.enable_thinking and --reasoning-budget 0 turn it off.

#include <gtest/gtest.h>

#include "aqpim/error.h"
#include "serve/chat_template.h"
#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;

// The answer is written through a one-choice constraint, as a reasoning model writes it.
const std::string kAnswer = "<think>\nBath, or York?\n</think>\n\nBath.";

json chat(bool stream) {
    return {{"messages", {{{"role", "user"}, {"content", "Where?"}}}}, {"max_tokens", 60}, {"seed", 1},
            {"guided_choice", {kAnswer}}, {"stream", stream}};
}

TEST(HttpReasoning, ThinkingComesBackAsReasoningContentWholeAndStreamed) {
    serve::ServerOptions so;
    so.reasoning_format = "deepseek";
    test::TestServer s(test::austen_serve_model(), test::small_engine(), so);
    auto c = s.client();
    const json choice = test::post(c, "/v1/chat/completions", chat(false))["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop");
    EXPECT_EQ(choice["message"]["reasoning_content"], "\nBath, or York?\n");
    EXPECT_EQ(choice["message"]["content"], "Bath.");

    const test::StreamedChat st = test::stream_chat(c, chat(false));
    EXPECT_FALSE(st.reasoning_late);
    EXPECT_EQ(st.reasoning, choice["message"]["reasoning_content"]);
    EXPECT_EQ(st.content, choice["message"]["content"]);
    EXPECT_EQ(st.finish, "stop");

    const auto models = c.Get("/v1/models");
    ASSERT_TRUE(models && models->status == 200);
    EXPECT_EQ(json::parse(models->body)["data"][0]["meta"]["reasoning_format"], "deepseek");
}

TEST(HttpReasoning, ACallAfterTheReasoningIsReadAsACall) {
    // tool_choice auto: the content after </think> is read for calls, whole and streamed.
    serve::ServerOptions so;
    so.reasoning_format = "deepseek";
    serve::EngineOptions eo = test::small_engine();
    eo.ctx = 1024;
    test::TestServer s(test::austen_serve_model(), eo, so);
    auto c = s.client();
    const std::string answer = "<think>The weather, so a call.</think>\n\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Bath\"}}";
    json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Bath?"}}}}, {"max_tokens", 80}, {"seed", 1},
                 {"guided_choice", {answer}},
                 {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}}}};
    const json choice = test::post(c, "/v1/chat/completions", body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_EQ(choice["message"]["reasoning_content"], "The weather, so a call.");
    EXPECT_TRUE(choice["message"]["content"].is_null());
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"town\":\"Bath\"}");

    const test::StreamedChat st = test::stream_chat(c, body);
    EXPECT_FALSE(st.reasoning_late);
    EXPECT_EQ(st.reasoning, "The weather, so a call.");
    EXPECT_EQ(st.content, "");
    ASSERT_EQ(st.tool_calls.size(), 1u);
    EXPECT_EQ(st.tool_calls[0]["function"], choice["message"]["tool_calls"][0]["function"]);
    EXPECT_EQ(st.finish, "tool_calls");
}

TEST(HttpReasoning, WithTheFormatNoneThinkingIsContent) {
    test::TestServer s(test::austen_serve_model(), test::small_engine());  // auto: austen-13m's template has no </think>
    auto c = s.client();
    const json message = test::post(c, "/v1/chat/completions", chat(false))["choices"][0]["message"];
    EXPECT_EQ(message["content"], kAnswer);
    EXPECT_FALSE(message.contains("reasoning_content"));
}

// A reasoning model: the synth model with <think> and </think> as tokens of their own and a ChatML
// template that opens the reasoning (QwQ's generation prompt, as its Jinja source writes it) or
// leaves it to the model (Qwen3's).
LoadedModel thinking_model(bool template_opens) {
    LoadedModel m = test::synth_serve_model();
    VocabData v = m.tokenizer->vocab();
    const std::size_t n = v.tokens.size();
    v.tokens[n - 2] = "<think>";
    v.tokens[n - 1] = "</think>";
    v.types[n - 2] = v.types[n - 1] = TokenType::user_defined;
    v.chat_template = R"({%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content.split('</think>')[-1] + '<|im_end|>\n' }}{%- endfor %})";
    v.chat_template += template_opens ? R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n<think>\n' }}{%- endif %})"
                                      : R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})";
    m.tokenizer = Tokenizer::create(v);
    return m;
}

std::int32_t token_of(const LoadedModel& m, const std::string& text) {
    const std::vector<std::int32_t> ids = m.tokenizer->encode(text, false);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.empty() ? -1 : ids[0];
}

/// The prompt's tokens: the ChatML turns, then `end` (what the reasoning adds).
std::size_t prompt_tokens(const LoadedModel& m, const json& messages, const std::string& end) {
    std::vector<serve::ChatMessage> turns;
    for (const json& t : messages) turns.push_back({t["role"], t["content"]});
    return m.tokenizer->encode(serve::render_chat(serve::ChatFormat::chatml, turns, {}) + end, true).size();
}

const json kWhere = {{{"role", "user"}, {"content", "Where?"}}};

TEST(HttpReasoning, AConstraintHoldsAfterTheReasoning) {
    const LoadedModel m = thinking_model(true);
    serve::EngineOptions eo = test::small_engine();
    eo.ctx = 1024;  // the synth vocabulary spells the template's markers byte by byte
    test::TestServer s(m, eo);
    auto c = s.client();
    const std::string close = std::to_string(token_of(m, "</think>")), eos = std::to_string(m.tokenizer->eos());
    // The prompt ends with <think>\n; </think> drawn first (biased), then the choice: the answer
    // after the reasoning is held to it.
    json body = {{"messages", kWhere}, {"max_tokens", 20}, {"seed", 1}, {"guided_choice", {"Bath.", "York."}},
                 {"logit_bias", {{close, 100}}}, {"logprobs", true}};
    const json done = test::post(c, "/v1/chat/completions", body);
    const json& choice = done["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop");
    EXPECT_EQ(choice["message"].value("reasoning_content", ""), "") << "an empty reasoning";
    EXPECT_TRUE(choice["message"]["content"] == "Bath." || choice["message"]["content"] == "York.") << choice;
    EXPECT_EQ(done["usage"]["prompt_tokens"], prompt_tokens(m, kWhere, "<think>\n"));
    // Generated: </think> first, then the choice (its logprobs list every generated token).
    ASSERT_TRUE(choice["logprobs"]["content"].is_array()) << choice;
    EXPECT_EQ(choice["logprobs"]["content"][0]["token"], "</think>");
    std::string after;
    for (std::size_t i = 1; i < choice["logprobs"]["content"].size(); ++i) after += choice["logprobs"]["content"][i]["token"].get<std::string>();
    EXPECT_EQ(after, choice["message"]["content"]);
    const test::StreamedChat st = test::stream_chat(c, body);
    EXPECT_EQ(st.reasoning, "");
    EXPECT_EQ(st.content, choice["message"]["content"]);

    // Held in the reasoning: no EOS (however likely) and no end, until max_tokens.
    body["logit_bias"] = {{close, -100}, {eos, 100}};
    body["max_tokens"] = 6;
    const json reasoned = test::post(c, "/v1/chat/completions", body);
    EXPECT_EQ(reasoned["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(reasoned["usage"]["completion_tokens"], 6);
    EXPECT_FALSE(reasoned["choices"][0]["message"]["reasoning_content"].get<std::string>().empty());
    EXPECT_TRUE(reasoned["choices"][0]["message"]["content"].is_null() || reasoned["choices"][0]["message"]["content"] == "");

    // A JSON schema, and a required call, after the reasoning.
    body = {{"messages", kWhere}, {"max_tokens", 400}, {"seed", 2}, {"logit_bias", {{close, 100}}},
            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "town"}, {"schema",
                {{"type", "object"}, {"properties", {{"town", {{"enum", {"Bath", "York"}}}}}}, {"required", {"town"}},
                 {"additionalProperties", false}}}}}}}};
    const json town = test::post(c, "/v1/chat/completions", body)["choices"][0];
    EXPECT_EQ(town["finish_reason"], "stop");
    const json parsed = json::parse(town["message"]["content"].get<std::string>());
    EXPECT_TRUE(parsed["town"] == "Bath" || parsed["town"] == "York") << town;
    body.erase("response_format");
    body["tools"] = {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters",
                      {{"type", "object"}, {"properties", {{"town", {{"enum", {"Bath", "York"}}}}}}, {"required", {"town"}},
                       {"additionalProperties", false}}}}}}};
    body["tool_choice"] = "required";
    body["parallel_tool_calls"] = false;
    const json call = test::post(c, "/v1/chat/completions", body)["choices"][0];
    EXPECT_EQ(call["finish_reason"], "tool_calls");
    EXPECT_EQ(call["message"].value("reasoning_content", ""), "");
    ASSERT_EQ(call["message"]["tool_calls"].size(), 1u) << call;
    EXPECT_EQ(call["message"]["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST(HttpReasoning, AModelThatOpensItsOwnReasoningMayAnswerAtOnce) {
    // Qwen3's template: the model writes <think> itself, or answers.
    const LoadedModel m = thinking_model(false);
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const std::string open = std::to_string(token_of(m, "<think>")), close = std::to_string(token_of(m, "</think>"));
    json body = {{"messages", kWhere}, {"max_tokens", 20}, {"seed", 1}, {"guided_choice", {"Bath.", "York."}},
                 {"logit_bias", {{open, 50}, {close, 100}}}};
    // </think> cannot come first; <think> can, then </think>, then the choice.
    const json reasoned = test::post(c, "/v1/chat/completions", body)["choices"][0];
    EXPECT_EQ(reasoned["message"].value("reasoning_content", ""), "");
    EXPECT_TRUE(reasoned["message"]["content"] == "Bath." || reasoned["message"]["content"] == "York.") << reasoned;
    EXPECT_EQ(reasoned["finish_reason"], "stop");
    // Without the bias toward <think>, the choice from the first token (the model's own draw).
    body["logit_bias"] = {{open, -100}};
    const json direct = test::post(c, "/v1/chat/completions", body)["choices"][0];
    EXPECT_FALSE(direct["message"].contains("reasoning_content"));
    EXPECT_TRUE(direct["message"]["content"] == "Bath." || direct["message"]["content"] == "York.") << direct;
}

TEST(HttpReasoning, EnableThinkingFalseAndABudgetOfZeroAnswerWithoutReasoning) {
    const LoadedModel m = thinking_model(true);
    const std::string open = std::to_string(token_of(m, "<think>"));
    const json kwargs_off = {{"enable_thinking", false}};
    json body = {{"messages", kWhere}, {"max_tokens", 20}, {"seed", 1}, {"guided_choice", {"Bath.", "York."}},
                 {"logit_bias", {{open, 100}}}};
    {
        test::TestServer s(m, test::small_engine());
        auto c = s.client();
        body["chat_template_kwargs"] = kwargs_off;
        // The prompt ends with an empty reasoning (Qwen3's template without thinking): the choice at
        // once, <think> refused however likely.
        const json done = test::post(c, "/v1/chat/completions", body);
        EXPECT_EQ(done["usage"]["prompt_tokens"], prompt_tokens(m, kWhere, "<think>\n\n</think>\n\n"));
        EXPECT_FALSE(done["choices"][0]["message"].contains("reasoning_content"));
        EXPECT_TRUE(done["choices"][0]["message"]["content"] == "Bath." || done["choices"][0]["message"]["content"] == "York.");
        // Refused: other variables (no Jinja runs here), and a wrong type.
        for (const json& kwargs : {json{{"enable_thinking", false}, {"tools_in_user_message", true}}, json{{"enable_thinking", "no"}},
                                   json(3)}) {
            body["chat_template_kwargs"] = kwargs;
            const json e = test::post(c, "/v1/chat/completions", body, 400);
            EXPECT_EQ(e["error"]["param"].get<std::string>().rfind("chat_template_kwargs", 0), 0u) << e;
        }
        // The completions endpoint has no chat template.
        EXPECT_EQ(test::post(c, "/v1/completions", {{"prompt", "x"}, {"chat_template_kwargs", kwargs_off}}, 400)["error"]["message"],
                  "Unrecognized request argument supplied: chat_template_kwargs");
    }
    serve::ServerOptions so;
    so.reasoning_budget = 0;
    test::TestServer s(m, test::small_engine(), so);
    auto c = s.client();
    body.erase("chat_template_kwargs");
    EXPECT_EQ(test::post(c, "/v1/chat/completions", body)["usage"]["prompt_tokens"],
              prompt_tokens(m, kWhere, "<think>\n\n</think>\n\n"));
    body["chat_template_kwargs"] = {{"enable_thinking", true}};  // the request's word over the server's
    EXPECT_EQ(test::post(c, "/v1/chat/completions", body)["usage"]["prompt_tokens"], prompt_tokens(m, kWhere, "<think>\n"));

    so.reasoning_budget = 100;  // llama-server takes -1 and 0 only
    EXPECT_THROW(so.validate(), Error);
}

}  // namespace
}  // namespace aqpim
