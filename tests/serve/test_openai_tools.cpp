// Tool calls as the request parser reads them (serve/openai_tools.cpp): the call's schema keeps
// a function's own `$defs` references, refuses parameters that do not describe an object, keys one
// of several required functions by name; calls and results in the conversation become turns
// (results merged with the user's turn around them, the calls' members in the written order);
// echoed response fields are taken; a finished text is read as a call in both forms; a body with
// an object too large to read in order is refused.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "serve/json_schema.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace aqpim {
namespace {

using nlohmann::json;

serve::RequestLimits limits() {
    serve::RequestLimits l;
    l.n_vocab = 512;
    return l;
}

/// The parsed chat request of `text` (read as the server reads it: the text kept for its order).
serve::CompletionParams chat(const std::string& text) {
    return serve::parse_completion_request(json::parse(text), true, limits(), text);
}

/// The ApiError's param a chat request gets ("" if none).
std::string refused(const std::string& text) {
    try {
        chat(text);
    } catch (const serve::ApiError& e) {
        return e.param();
    }
    return "";
}

bool whole(const serve::JsonSchema& s, const std::string& text) {
    serve::JsonSchemaPrefix p(s);
    return p.feed(text) && p.complete();
}

const std::string kUser = R"("messages": [{"role": "user", "content": "x"}])";

TEST(OpenAiTools, TheCallsSchemaKeepsTheFunctionsParameters) {
    // A function's $defs (pydantic's nested models) are found where the call's schema holds them.
    const serve::CompletionParams p = chat("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "$defs": {"U": {"enum": ["c", "f"]}}, "properties": {"u": {"$ref": "#/$defs/U"}},
        "required": ["u"]}}}], "tool_choice": {"type": "function", "function": {"name": "f"}}})");
    ASSERT_TRUE(p.json_schema);
    EXPECT_EQ(p.tool_choice, serve::CompletionParams::ToolChoice::named);
    EXPECT_TRUE(whole(*p.json_schema, R"({"name":"f","arguments":{"u":"c"}})"));
    EXPECT_FALSE(whole(*p.json_schema, R"({"name":"f","arguments":{"u":"x"}})"));
    EXPECT_FALSE(whole(*p.json_schema, R"({"name":"g","arguments":{"u":"c"}})"));
    // {} parameters: any object.
    const serve::CompletionParams any = chat("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": "f",
        "parameters": {}}}], "tool_choice": "required"})");
    EXPECT_TRUE(whole(*any.json_schema, R"({"name":"f","arguments":{"k":[1]}})"));
    // Several functions, one required: {"name": N, "arguments": A}, A of the function named (an
    // anyOf of calls told apart by the name); with parallel_tool_calls, or a non-empty array of them.
    const std::string several = "{" + kUser + R"(, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "$defs": {"B": {"type": "boolean"}},
          "properties": {"b": {"$ref": "#/$defs/B"}}}}}], "tool_choice": "required")";
    for (const bool parallel : {true, false}) {
        const serve::CompletionParams required = chat(several + (parallel ? "}" : R"(, "parallel_tool_calls": false})"));
        const serve::JsonSchema& s = *required.json_schema;
        EXPECT_TRUE(whole(s, R"({"name":"g","arguments":{"b":true}})"));
        EXPECT_TRUE(whole(s, R"({"name":"f","arguments":{"a":3}})"));
        EXPECT_FALSE(whole(s, R"({"name":"g","arguments":{"b":3}})")) << "g's $defs, where the call's schema holds them";
        EXPECT_FALSE(whole(s, R"({"name":"f","arguments":{"b":true}})")) << "f's arguments are its own";
        EXPECT_EQ(whole(s, R"([{"name":"f","arguments":{"a":3}},{"name":"g","arguments":{}}])"), parallel);
        EXPECT_FALSE(whole(s, "[]"));
        EXPECT_EQ(required.messages[0].content.find("To call several at once") != std::string::npos, parallel);
    }
    const serve::CompletionParams parallel = chat(several + "}");
    serve::JsonSchemaPrefix two(*parallel.json_schema);
    EXPECT_FALSE(two.feed(R"({"name":"f","arguments":{"a":3}},)")) << "several calls are an array";
    const serve::CompletionParams forced = chat("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": "f"}},
        {"type": "function", "function": {"name": "g"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})");
    EXPECT_FALSE(whole(*forced.json_schema, R"([{"name":"g","arguments":{}}])")) << "a named function: one call";
    EXPECT_FALSE(whole(*forced.json_schema, R"({"name":"f","arguments":{}})"));
    // A "$ref" inside a const is a value, not a reference: it is not moved.
    const serve::CompletionParams literal = chat("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"k": {"const": {"$ref": "#/x"}}}, "required": ["k"]}}}], "tool_choice": "required"})");
    EXPECT_TRUE(whole(*literal.json_schema, R"({"name":"f","arguments":{"k":{"$ref":"#/x"}}})"));
    // Parameters that admit values other than objects are refused, naming the tool.
    EXPECT_EQ(refused("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
        "tool_choice": "required"})"),
              "tools[0].function.parameters");
    EXPECT_EQ(refused("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": "f"}},
        {"type": "function", "function": {"name": "g", "parameters": {"anyOf": [{"type": "object"}, {"type": "null"}]}}}],
        "tool_choice": "required"})"),
              "tools[1].function.parameters");
    EXPECT_EQ(refused("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "retrieval", "function": {"name": "f"}}})"),
              "tool_choice");
}

TEST(OpenAiTools, CallsAndResultsBecomeTurns) {
    const serve::CompletionParams p = chat(R"({"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "refusal": null, "annotations": [], "function_call": null, "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"town\": \"Bath\", \"at\": 9}"}},
          {"id": "c2", "type": "function", "function": {"name": "w", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        {"role": "tool", "tool_call_id": "c2", "content": "sun"},
        {"role": "user", "content": "Thanks."}],
      "tools": [{"type": "function", "function": {"name": "w", "description": "weather"}}]})");
    ASSERT_EQ(p.messages.size(), 4u);
    EXPECT_EQ(p.messages[0].role, "system");
    EXPECT_NE(p.messages[0].content.find(R"("name":"w","description":"weather")"), std::string::npos) << p.messages[0].content;
    EXPECT_EQ(p.messages[2].role, "assistant");
    EXPECT_EQ(p.messages[2].content, "{\"name\":\"w\",\"arguments\":{\"town\":\"Bath\",\"at\":9}}\n{\"name\":\"w\",\"arguments\":{}}")
        << "the members in the order written";
    EXPECT_EQ(p.messages[3].role, "user");
    EXPECT_EQ(p.messages[3].content, "The result of the call c1:\nrain\n\nThe result of the call c2:\nsun\n\nThanks.")
        << "one user turn: formats that alternate turns take it";
    EXPECT_EQ(p.tool_choice, serve::CompletionParams::ToolChoice::auto_call);
    EXPECT_FALSE(p.json_schema) << "auto: the output is free";
}

TEST(OpenAiTools, AFinishedTextIsReadAsCallsInTheFormsModelsWrite) {
    const std::vector<std::string> names = {"w", "v"};
    const auto calls = [&](const std::string& text, bool parallel = true) { return serve::tool_calls_of(text, names, "x", parallel); };
    const json a = serve::tool_calls_of(R"( {"name": "w", "arguments": {"z": 1, "a": [true]}})", names, "call_1", true).calls;
    ASSERT_TRUE(a.is_array());
    EXPECT_EQ(a[0]["id"], "call_1");
    EXPECT_EQ(a[0]["function"]["name"], "w");
    EXPECT_EQ(a[0]["function"]["arguments"], R"({"z":1,"a":[true]})") << "the written order";
    EXPECT_EQ(calls(R"({"v": {}})").calls[0]["function"]["name"], "v");
    EXPECT_TRUE(calls(R"({"name": "u", "arguments": {}})").calls.is_null()) << "not a tool";
    EXPECT_TRUE(calls(R"({"name": "w", "arguments": 3})").calls.is_null());
    EXPECT_TRUE(calls("It is raining.").calls.is_null());
    EXPECT_TRUE(calls(std::string(5000, '[') + std::string(5000, ']')).calls.is_null()) << "deep: not read";
    // Llama 3.1's "parameters", after its python tag; arguments written as a JSON text.
    const serve::ToolCallsRead llama = calls(R"(<|python_tag|>{"name": "v", "parameters": {"q": "x"}})");
    ASSERT_EQ(llama.calls.size(), 1u);
    EXPECT_EQ(llama.calls[0]["function"]["arguments"], R"({"q":"x"})");
    EXPECT_EQ(calls(R"({"name": "w", "arguments": "{\"z\": 2}"})").calls[0]["function"]["arguments"], R"({"z":2})");
    // Several calls: an array (Mistral's, after [TOOL_CALLS]), each its own id.
    const json two = calls(R"([TOOL_CALLS] [{"name": "w", "arguments": {}}, {"name": "v", "arguments": {"k": 1}}])").calls;
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0]["id"], "x");
    EXPECT_EQ(two[1]["id"], "x_1");
    EXPECT_EQ(two[1]["function"]["name"], "v");
    EXPECT_EQ(calls(R"([{"name": "w", "arguments": {}}, {"name": "v", "arguments": {}}])", false).calls.size(), 1u)
        << "parallel_tool_calls false: the first";
    EXPECT_TRUE(calls(R"([{"name": "w", "arguments": {}}, 3])").calls.is_null()) << "every element a call";
    EXPECT_TRUE(calls("[]").calls.is_null());
    // Hermes' tags (Qwen, chatml models): content before them is the message's content.
    const serve::ToolCallsRead hermes =
        calls("Let me look.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"z\": 1}}\n</tool_call>\n<tool_call>{\"name\": \"v\", "
              "\"arguments\": {}}</tool_call>\n");
    ASSERT_EQ(hermes.calls.size(), 2u);
    EXPECT_EQ(hermes.content, "Let me look.");
    EXPECT_EQ(hermes.calls[1]["function"]["name"], "v");
    EXPECT_EQ(calls(R"(<tool_call>{"name": "w", "arguments": {}})").calls.size(), 1u) << "the last closing tag may be missing";
    EXPECT_TRUE(calls(R"(<tool_call>{"name": "w", "arguments": {}}</tool_call> and then)").calls.is_null())
        << "text after the calls: not a call";
    EXPECT_TRUE(calls(R"(<tool_call>{"name": "w"}</tool_call>)").calls.is_null());
    EXPECT_TRUE(calls(R"(<tool_call>{"name": "w", "arguments": {}}</tool_call><tool_call>nonsense</tool_call>)").calls.is_null());
    // DeepSeek V3's and R1's tokens, content before them.
    const std::string b = "<\uFF5Ctool\u2581calls\u2581begin\uFF5C>", cb = "<\uFF5Ctool\u2581call\u2581begin\uFF5C>",
                      sep = "<\uFF5Ctool\u2581sep\uFF5C>", ce = "<\uFF5Ctool\u2581call\u2581end\uFF5C>",
                      e = "<\uFF5Ctool\u2581calls\u2581end\uFF5C>";
    const serve::ToolCallsRead ds = calls("Checking." + b + cb + "function" + sep + "w\n```json\n{\"z\": 1}\n```" + ce + cb + "function" +
                                          sep + "v\n```json\n{}\n```" + ce + e + "\n");
    ASSERT_EQ(ds.calls.size(), 2u);
    EXPECT_EQ(ds.content, "Checking.");
    EXPECT_EQ(ds.calls[0]["function"]["name"], "w");
    EXPECT_EQ(ds.calls[0]["function"]["arguments"], R"({"z":1})");
    EXPECT_EQ(ds.calls[1]["id"], "x_1");
    EXPECT_EQ(calls(cb + "function" + sep + "v\n```json\n{\"k\": [1]}\n```").calls.size(), 1u)
        << "the outer tokens and the last end may be missing";
    EXPECT_EQ(calls(b + cb + "function" + sep + "w\n{}" + ce + e).calls.size(), 1u) << "arguments without the code fence";
    EXPECT_TRUE(calls(b + cb + "function" + sep + "u\n```json\n{}\n```" + ce + e).calls.is_null()) << "not a tool";
    EXPECT_TRUE(calls(b + cb + "code" + sep + "w\n```json\n{}\n```" + ce + e).calls.is_null()) << "not a function";
    EXPECT_TRUE(calls(b + cb + "function" + sep + "w\n```json\n[1]\n```" + ce + e).calls.is_null()) << "arguments not an object";
    EXPECT_TRUE(calls(b + cb + "function" + sep + "w\n```json\n{}\n```" + ce + e + " more").calls.is_null()) << "text after them";
    EXPECT_TRUE(calls(b + e).calls.is_null()) << "no call";
    EXPECT_EQ(serve::tool_calls_in_tags("So." + cb + "function" + sep + "w\n{}" + ce, names, "x", true).calls.size(), 1u)
        << "after content, as a stream reads it";
    EXPECT_TRUE(serve::may_open_tool_calls("so " + b.substr(0, 4)));
    EXPECT_TRUE(serve::may_open_tool_calls("so " + cb));
    EXPECT_TRUE(serve::may_be_tool_calls(b.substr(0, 5)));
    // What a stream holds while it may still be calls.
    for (const char* held : {"", "  ", " {\"na", "[", "[ {", "{ ", "<tool", "<tool_call>{", "<|python", "[TOOL_CALLS] ["})
        EXPECT_TRUE(serve::may_be_tool_calls(held)) << held;
    for (const char* held : {"It", " <b>", "<tool_cal!", "\"x\"", "[link](x)", "{x", "[1, 2]"})
        EXPECT_FALSE(serve::may_be_tool_calls(held)) << held;
    // ... and what it holds after content, while Hermes' tags may open.
    for (const char* piece : {"so <", "so <tool_c", "so <tool_call>{", "<tool_call>"}) EXPECT_TRUE(serve::may_open_tool_calls(piece)) << piece;
    for (const char* piece : {"so", "so <tools", "so < tool_call>", "<tool_call"}) EXPECT_EQ(serve::may_open_tool_calls(piece), std::string(piece) == "<tool_call") << piece;
}

TEST(OpenAiTools, SchemasRefuseWhatTheyCannotKeep) {
    // Beside listed properties, minProperties and maxProperties other than both 1 are refused, typed or not (never dropped).
    EXPECT_THROW(serve::JsonSchema(nlohmann::ordered_json::parse(R"({"type":"object","properties":{"a":{"properties":{"x":{}},"minProperties":2}}})")),
                 serve::JsonSchemaError);
    // A body with an object too large to read in written order is refused when a schema needs it.
    json body = {{"prompt", "x"}, {"response_format", {{"type", "json_object"}, {"schema", {{"type", "object"}}}}}};
    for (int i = 0; i < 1025; ++i) body["padding"]["k" + std::to_string(i)] = 0;
    body.erase("padding");
    json padded = body;
    for (int i = 0; i < 1025; ++i) padded["response_format"]["schema"]["x" + std::to_string(i)] = 0;
    try {
        serve::parse_completion_request(padded, false, limits(), padded.dump());
        ADD_FAILURE() << "an object of 1025 members";
    } catch (const serve::ApiError& e) {
        EXPECT_EQ(e.param(), "request body");
    }
    EXPECT_NO_THROW(serve::parse_completion_request(body, false, limits(), body.dump()));
}

}  // namespace
}  // namespace aqpim
