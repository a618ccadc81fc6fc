// Tool calls over HTTP (chat `tools` and `tool_choice`, docs/serve.md "Tool calls"): a named or
// required call comes back as message.tool_calls with arguments of the function's schema, streamed
// as one tool_calls delta with the same call; "auto" on a model that writes prose answers with
// content, streamed as whole; several calls in Hermes' tags or as an array are read (content before
// them kept); a conversation holding calls and their results is read; what is wrong is refused
// naming the field.

#include <gtest/gtest.h>

#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;
using test::post;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a town.",
    "parameters": {"type": "object", "properties": {"town": {"type": "string", "maxLength": 16},
      "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["town", "unit"]}}},
  {"type": "function", "function": {"name": "send_letter", "parameters": {"type": "object",
    "properties": {"to": {"type": "string", "maxLength": 12}}, "required": ["to"]}}}])");

json chat(const json& extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Bath?"}}}}, {"max_tokens", 300},
                 {"temperature", 0.8}, {"tools", kTools}};
    body.update(extra);
    return body;
}

using Streamed = test::StreamedChat;
Streamed stream(httplib::Client& c, const json& body) { return test::stream_chat(c, body); }

/// The tools' description makes a 300-token prompt: sequences of 1024 tokens.
serve::EngineOptions tool_engine() {
    serve::EngineOptions o = test::small_engine();
    o.ctx = 1024;
    return o;
}

TEST(HttpToolCalls, ANamedOrRequiredCallHasItsFunctionsArguments) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, tool_engine());
    auto c = s.client();
    int called = 0;
    for (int seed = 1; seed <= 4; ++seed) {
        const json body = chat({{"seed", seed}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
        const json choice = post(c, "/v1/chat/completions", body)["choices"][0];
        if (choice["finish_reason"] == "length") {
            EXPECT_TRUE(choice["message"]["content"].is_string()) << choice.dump();
            continue;
        }
        ++called;
        EXPECT_EQ(choice["finish_reason"], "stop") << "a forced call ends with stop, as OpenAI's";
        EXPECT_TRUE(choice["message"]["content"].is_null());
        const json call = choice["message"]["tool_calls"][0];
        EXPECT_EQ(call["type"], "function");
        EXPECT_EQ(call["function"]["name"], "get_weather");
        EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
        const json args = json::parse(call["function"]["arguments"].get<std::string>());
        EXPECT_TRUE(args["town"].is_string() && args["town"].get<std::string>().size() <= 16 * 4) << args.dump();
        EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args.dump();
        // Streamed: one tool_calls delta holding the same call, no content.
        const Streamed st = stream(c, body);
        EXPECT_EQ(st.content, "");
        ASSERT_EQ(st.tool_calls.size(), 1u);
        EXPECT_EQ(st.tool_calls[0]["index"], 0);
        EXPECT_EQ(st.tool_calls[0]["function"], call["function"]);
        EXPECT_EQ(st.finish, "stop");
    }
    EXPECT_GE(called, 2) << "300 tokens finish most calls (a 13M model pads with the whitespace JSON allows)";
    // required: one of the tools (either name), finish_reason tool_calls. (With parallel_tool_calls
    // the answer may be an array of calls, which austen-13m goes on filling until max_tokens.)
    int required = 0;
    for (int seed = 1; seed <= 4; ++seed) {
        const json body = chat({{"seed", seed}, {"tool_choice", "required"}, {"parallel_tool_calls", false}});
        const json choice = post(c, "/v1/chat/completions", body)["choices"][0];
        if (choice["finish_reason"] == "length") continue;
        ++required;
        EXPECT_EQ(choice["finish_reason"], "tool_calls");
        const std::string name = choice["message"]["tool_calls"][0]["function"]["name"];
        EXPECT_TRUE(name == "get_weather" || name == "send_letter") << name;
        EXPECT_TRUE(json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()).is_object());
    }
    EXPECT_GE(required, 2);
}

TEST(HttpToolCalls, AutoLeavesProseAsContentAndReadsAConversationWithCalls) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, tool_engine());
    auto c = s.client();
    // austen-13m writes prose, not calls: "auto" (the default with tools) answers with content.
    const json body = chat({{"seed", 3}, {"max_tokens", 30}});
    const json choice = post(c, "/v1/chat/completions", body)["choices"][0];
    EXPECT_TRUE(choice["message"]["content"].is_string());
    EXPECT_FALSE(choice["message"].contains("tool_calls"));
    EXPECT_NE(choice["finish_reason"], "tool_calls");
    const Streamed st = stream(c, body);
    EXPECT_EQ(st.content, choice["message"]["content"]) << "held only while it may be a call, then sent";
    EXPECT_TRUE(st.tool_calls.empty());
    // "none": the same request without tools in the prompt gives the text a request without tools gives.
    json plain = body;
    plain.erase("tools");
    EXPECT_EQ(post(c, "/v1/chat/completions", chat({{"seed", 3}, {"max_tokens", 30}, {"tool_choice", "none"}}))["choices"][0]["message"]["content"],
              post(c, "/v1/chat/completions", plain)["choices"][0]["message"]["content"]);
    // A conversation with a call and its result, then the user: read and answered.
    json turn = chat({{"seed", 1}, {"max_tokens", 8}});
    turn["messages"] = json::parse(R"([
      {"role": "user", "content": "Weather in Bath?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"town\": \"Bath\", \"unit\": \"celsius\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "Rain, 9 degrees."},
      {"role": "user", "content": "Thank you."}])");
    EXPECT_EQ(post(c, "/v1/chat/completions", turn)["object"], "chat.completion");
}

TEST(HttpToolCalls, AutoReadsSeveralCallsInTheFormsModelsWrite) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, tool_engine());
    auto c = s.client();
    // austen-13m writes no calls of its own: a one-choice constraint (allowed beside "auto") makes it
    // write what a tool-calling model would, and the server reads that answer as a model's.
    const std::string hermes =
        "Checking.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Bath\", \"unit\": \"celsius\"}}</tool_call>\n"
        "<tool_call>{\"name\": \"send_letter\", \"arguments\": {\"to\": \"Isabella\"}}</tool_call>";
    const json choice = post(c, "/v1/chat/completions", chat({{"seed", 1}, {"guided_choice", {hermes}}}))["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_EQ(choice["message"]["content"], "Checking.") << "the text before the calls";
    const json& calls = choice["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 2u) << choice.dump();
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>())["town"], "Bath");
    EXPECT_EQ(calls[1]["function"]["name"], "send_letter");
    EXPECT_NE(calls[0]["id"], calls[1]["id"]);
    // Streamed: the content as it comes, then the tags held from their '<' and sent as one delta.
    const Streamed tagged = stream(c, chat({{"seed", 1}, {"guided_choice", {hermes}}}));
    EXPECT_EQ(tagged.finish, "tool_calls");
    EXPECT_EQ(tagged.content, "Checking.");
    ASSERT_EQ(tagged.tool_calls.size(), 2u);
    EXPECT_EQ(tagged.tool_calls[0]["function"], calls[0]["function"]);
    EXPECT_EQ(tagged.tool_calls[1]["function"], calls[1]["function"]);
    const std::string not_a_tag = "Use <tools> wisely.";
    const Streamed prose_tag = stream(c, chat({{"seed", 1}, {"guided_choice", {not_a_tag}}}));
    EXPECT_EQ(prose_tag.content, not_a_tag) << "held while it might open a call, then sent";
    EXPECT_TRUE(prose_tag.tool_calls.empty());
    // After content only Hermes' tags are calls (the other forms are whole answers): a marker and a
    // call after text stay content, streamed or not.
    const std::string late = R"(Sure <|python_tag|>{"name": "get_weather", "parameters": {"town": "Bath", "unit": "celsius"}})";
    const json late_whole = post(c, "/v1/chat/completions", chat({{"seed", 1}, {"guided_choice", {late}}}))["choices"][0];
    EXPECT_EQ(late_whole["message"]["content"], late);
    const Streamed late_streamed = stream(c, chat({{"seed", 1}, {"guided_choice", {late}}}));
    EXPECT_EQ(late_streamed.content, late);
    EXPECT_TRUE(late_streamed.tool_calls.empty());
    // An array (Mistral's form) streamed: held from its '[' and sent as one delta of both calls.
    const std::string array = R"([{"name": "send_letter", "arguments": {"to": "Eleanor"}}, {"name": "get_weather", "parameters": {"town": "York", "unit": "celsius"}}])";
    const Streamed st = stream(c, chat({{"seed", 1}, {"guided_choice", {array}}}));
    EXPECT_EQ(st.finish, "tool_calls");
    EXPECT_EQ(st.content, "");
    ASSERT_EQ(st.tool_calls.size(), 2u);
    EXPECT_EQ(st.tool_calls[1]["index"], 1);
    EXPECT_EQ(st.tool_calls[1]["function"]["arguments"], R"({"town":"York","unit":"celsius"})");
    // parallel_tool_calls false: the first call alone.
    const json one = post(c, "/v1/chat/completions", chat({{"seed", 1}, {"guided_choice", {array}}, {"parallel_tool_calls", false}}));
    EXPECT_EQ(one["choices"][0]["message"]["tool_calls"].size(), 1u);
    // A call of a function not among the tools is content.
    const std::string unknown = R"({"name": "fly", "arguments": {}})";
    const json prose = post(c, "/v1/chat/completions", chat({{"seed", 1}, {"guided_choice", {unknown}}}))["choices"][0];
    EXPECT_EQ(prose["message"]["content"], unknown);
    EXPECT_EQ(prose["finish_reason"], "stop");
}

TEST(HttpToolCalls, RefusesWhatIsWrongNamingTheField) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, tool_engine());
    auto c = s.client();
    const auto param = [&](const json& body) { return post(c, "/v1/chat/completions", body, 400)["error"]["param"]; };
    json no_tools = chat({{"tool_choice", "required"}});
    no_tools.erase("tools");
    EXPECT_EQ(param(no_tools), "tool_choice");
    EXPECT_EQ(param(chat({{"tool_choice", {{"type", "function"}, {"function", {{"name", "fly"}}}}}})), "tool_choice.function.name");
    EXPECT_EQ(param(chat({{"tool_choice", "sometimes"}})), "tool_choice");
    EXPECT_EQ(param(chat({{"tools", json::parse(R"([{"type": "function", "function": {"name": "a b"}}])")}})), "tools[0].function.name");
    EXPECT_EQ(param(chat({{"tools", json::parse(R"([{"type": "retrieval"}])")}})), "tools[0].type");
    EXPECT_EQ(param(chat({{"tools", json::parse(R"([{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"not": {}}}}}}])")},
                          {"tool_choice", "required"}})),
              "tools[0].function.parameters");
    EXPECT_EQ(param(chat({{"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}})), "tool_choice");
    json bad_call = chat(json::object());
    bad_call["messages"] = json::parse(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "x", "arguments": "{"}}]}])");
    EXPECT_EQ(param(bad_call), "messages[0].tool_calls[0].function.arguments");
    EXPECT_EQ(post(c, "/v1/completions", {{"prompt", "x"}, {"tools", kTools}}, 400)["error"]["param"], "tools");
}

}  // namespace
}  // namespace aqpim
