// Reasoning over HTTP (--reasoning-format deepseek, docs/serve.md "Reasoning"): an answer's
// <think>...</think> comes back as message.reasoning_content, streamed as delta.reasoning_content
// before the content, the same text either way; with the format none it is content.

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace aqpim
