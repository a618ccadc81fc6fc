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

    auto r = test::post_json(c, "/v1/chat/completions", chat(true));
    ASSERT_TRUE(r && r->status == 200);
    std::string reasoning, content;
    for (const std::string& e : test::sse_data(r->body)) {
        if (e == "[DONE]") continue;
        const json chunk = json::parse(e);
        const json& delta = chunk["choices"][0]["delta"];
        if (delta.contains("reasoning_content")) {
            EXPECT_TRUE(content.empty()) << "reasoning after content";
            reasoning += delta["reasoning_content"].get<std::string>();
        }
        content += delta.value("content", "");
    }
    EXPECT_EQ(reasoning, choice["message"]["reasoning_content"]);
    EXPECT_EQ(content, choice["message"]["content"]);

    const auto models = c.Get("/v1/models");
    ASSERT_TRUE(models && models->status == 200);
    EXPECT_EQ(json::parse(models->body)["data"][0]["meta"]["reasoning_format"], "deepseek");
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
