// JSON mode over HTTP (`response_format: {"type": "json_object"}`): every response is a prefix of a
// JSON object (with top_k and min_p too), a finished one parses as an object and ends with `stop`,
// streamed as whole; the same requests without it are not JSON. With a schema (`json_schema`, or
// llama-server's `schema` beside json_object) every response is a prefix of a value it accepts,
// its properties in the order the client wrote them. Unsupported schemas and JSON mode with a
// parked slot are refused.

#include <gtest/gtest.h>

#include "serve/http_test_util.h"
#include "serve/json_constraint.h"
#include "serve/json_schema.h"

namespace aqpim {
namespace {

using nlohmann::json;
using test::post;

bool json_prefix(const std::string& text) { return serve::JsonPrefix().feed(text); }

TEST(HttpJsonMode, EveryResponseIsAJsonObjectOrItsBeginning) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine("pq:calib=16,refresh=0,window=4,sinks=2"));
    auto c = s.client();
    int free_not_json = 0;
    for (int seed = 1; seed <= 6; ++seed) {
        json body = {{"prompt", "Catherine said"}, {"max_tokens", 40}, {"temperature", 1.0}, {"seed", seed}};
        const std::string free_text = post(c, "/v1/completions", body)["choices"][0]["text"];
        free_not_json += !json_prefix(free_text);
        body["response_format"] = {{"type", "json_object"}};
        const json r = post(c, "/v1/completions", body);
        const std::string text = r["choices"][0]["text"];
        EXPECT_TRUE(json_prefix(text)) << text;
        EXPECT_NE(text.find('{'), std::string::npos) << "40 tokens open the object: " << text;
        if (r["choices"][0]["finish_reason"] == "stop") {
            EXPECT_TRUE(json::parse(text).is_object()) << text;
        }
        if (seed == 1) {  // streamed: the same text
            body["stream"] = true;
            auto st = test::post_json(c, "/v1/completions", body);
            ASSERT_TRUE(st && st->status == 200);
            std::string streamed;
            for (const std::string& e : test::sse_data(st->body))
                if (e != "[DONE]") streamed += json::parse(e)["choices"][0]["text"].get<std::string>();
            EXPECT_EQ(streamed, text);
        }
    }
    EXPECT_GT(free_not_json, 3) << "without JSON mode the same requests are mostly not JSON";
    // top_k and min_p choose among the tokens JSON mode lets through (applied after it, they would
    // keep only the model's favourite prose tokens and leave nothing valid to draw).
    for (const json& truncation : {json{{"top_k", 1}}, json{{"top_k", 3}}, json{{"min_p", 0.5}}}) {
        json body = {{"prompt", "Catherine said"}, {"max_tokens", 40}, {"temperature", 1.0}, {"seed", 9},
                     {"response_format", {{"type", "json_object"}}}};
        body.update(truncation);
        const std::string text = post(c, "/v1/completions", body)["choices"][0]["text"];
        EXPECT_TRUE(json_prefix(text)) << truncation.dump() << ": " << text;
        EXPECT_NE(text.find('{'), std::string::npos) << truncation.dump() << ": " << text;
    }
}

TEST(HttpJsonMode, AFinishedObjectStopsTheRequest) {
    // With '{' and '}' favoured, the mask keeps '}' out until '{' opened the object: "{}" then stop.
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    auto id_of = [&](const std::string& ch) {  // "x{" is "x" then "{" (alone it gets the space prefix)
        const json ids = post(c, "/tokenize", {{"content", "x" + ch}})["tokens"];
        EXPECT_EQ(post(c, "/detokenize", {{"tokens", {ids.back()}}})["content"], ch);
        return ids.back().get<int>();
    };
    const json bias = {{std::to_string(id_of("{")), 50}, {std::to_string(id_of("}")), 100}};
    const json r = post(c, "/v1/completions", {{"prompt", "It was"}, {"max_tokens", 30}, {"temperature", 0},
                                               {"logit_bias", bias}, {"response_format", {{"type", "json_object"}}}});
    EXPECT_EQ(r["choices"][0]["text"], "{}");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(r["usage"]["completion_tokens"], 2);
    const json chat = post(c, "/v1/chat/completions",
                           {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}}, {"max_tokens", 30},
                            {"temperature", 0}, {"logit_bias", bias}, {"response_format", {{"type", "json_object"}}}});
    EXPECT_EQ(chat["choices"][0]["message"]["content"], "{}");
    EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
    // Without JSON mode the same bias writes '}' first.
    const json free = post(c, "/v1/completions", {{"prompt", "It was"}, {"max_tokens", 2}, {"temperature", 0}, {"logit_bias", bias}});
    EXPECT_EQ(free["choices"][0]["text"], "}}");
}

TEST(HttpJsonMode, RefusesWhatItDoesNotDo) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const json base = {{"prompt", "x"}, {"max_tokens", 4}};
    json b = base;
    b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", json::object()}}}};
    EXPECT_NE(post(c, "/v1/completions", b, 400)["error"]["message"].get<std::string>().find("root must be an object"), std::string::npos);
    b["response_format"] = {{"type", "json_schema"},
                            {"json_schema", {{"schema", {{"type", "object"}, {"properties", {{"a", {{"pattern", "(?=x)"}}}}}}}}}};
    const json refused = post(c, "/v1/completions", b, 400)["error"];
    EXPECT_EQ(refused["param"], "response_format");
    EXPECT_EQ(refused["message"], "response_format: json_schema.schema at /properties/a/pattern: at byte 0 of the pattern: lookaround is not supported");
    b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}};
    EXPECT_NE(post(c, "/v1/completions", b, 400)["error"]["message"].get<std::string>().find("\"schema\""), std::string::npos);
    b["response_format"] = {{"type", "yaml"}};
    EXPECT_EQ(post(c, "/v1/completions", b, 400)["error"]["param"], "response_format");
    b["response_format"] = {{"type", "json_object"}};
    b["keep_slot"] = true;
    EXPECT_EQ(post(c, "/v1/completions", b, 400)["error"]["param"], "keep_slot");
    b = base;
    b["response_format"] = {{"type", "text"}};
    EXPECT_EQ(post(c, "/v1/completions", b)["choices"].size(), 1u);
}

// A schema the client wrote, its properties in its order (not nlohmann::json's sorted one).
const char* kCharacterSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "mood": {"enum": ["happy", "sad"]},
    "age": {"type": "integer"},
    "friends": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2}},
  "required": ["name", "mood", "age"], "additionalProperties": false})";

TEST(HttpJsonMode, AJsonSchemaShapesTheObject) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine("pq:calib=16,refresh=0,window=4,sinks=2"));
    auto c = s.client();
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(kCharacterSchema);
    const serve::JsonSchema compiled(schema);
    int finished = 0;
    for (int seed = 1; seed <= 6; ++seed) {
        // The body as text, so that the server reads the schema's order as written.
        const std::string body = R"({"prompt": "Catherine said", "max_tokens": 200, "temperature": 1.0, "seed": )" +
                                 std::to_string(seed) +
                                 R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "character", "strict": true, "schema": )" +
                                 kCharacterSchema + "}}}";
        const json choice = test::first_choice_of_text(c, "/v1/completions", body);
        const std::string text = choice.value("text", "");
        EXPECT_TRUE(serve::JsonSchemaPrefix(compiled).feed(text)) << text;
        if (choice["finish_reason"] != "stop") continue;
        ++finished;
        const nlohmann::ordered_json v = nlohmann::ordered_json::parse(text);
        std::vector<std::string> keys;
        for (const auto& [k, _] : v.items()) keys.push_back(k);
        ASSERT_GE(keys.size(), 3u) << text;
        EXPECT_EQ(keys[0], "name");
        EXPECT_EQ(keys[1], "mood") << "the schema's order, not the alphabet's";
        EXPECT_EQ(keys[2], "age");
        EXPECT_TRUE(v["mood"] == "happy" || v["mood"] == "sad") << text;
        EXPECT_TRUE(v["age"].is_number_integer()) << text;
    }
    EXPECT_GE(finished, 3) << "200 tokens finish most of the objects";
    // A body built as nlohmann::json holds the schema's members sorted: "age" first.
    const serve::JsonSchema sorted{nlohmann::ordered_json(json::parse(kCharacterSchema))};
    // Chat, streamed: the same content as the whole response.
    json chat = {{"messages", {{{"role", "user"}, {"content", "Describe Catherine."}}}}, {"max_tokens", 60},
                 {"temperature", 0.8}, {"seed", 3},
                 {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "c"}, {"schema", json::parse(kCharacterSchema)}}}}}};
    const std::string whole = post(c, "/v1/chat/completions", chat)["choices"][0]["message"]["content"];
    EXPECT_TRUE(serve::JsonSchemaPrefix(sorted).feed(whole)) << whole;
    EXPECT_EQ(test::streamed_chat_content(c, chat), whole);
    // llama-server's form: a "schema" beside {"type": "json_object"}.
    const json llama = post(c, "/v1/completions", {{"prompt", "Catherine said"}, {"max_tokens", 60}, {"temperature", 0}, {"seed", 1},
                                                   {"response_format", {{"type", "json_object"}, {"schema", json::parse(kCharacterSchema)}}}});
    EXPECT_TRUE(serve::JsonSchemaPrefix(sorted).feed(llama["choices"][0]["text"].get<std::string>())) << llama.dump();
    EXPECT_FALSE(serve::JsonSchemaPrefix(compiled).feed(llama["choices"][0]["text"].get<std::string>())) << "the order matters";
    // llama-server's top-level "json_schema": the same text as the same schema in response_format.
    const json top = post(c, "/v1/completions", {{"prompt", "Catherine said"}, {"max_tokens", 60}, {"temperature", 0}, {"seed", 1},
                                                 {"json_schema", json::parse(kCharacterSchema)}});
    EXPECT_EQ(top["choices"][0]["text"], llama["choices"][0]["text"]);
    EXPECT_EQ(post(c, "/v1/completions", {{"prompt", "x"}, {"json_schema", json::parse(kCharacterSchema)},
                                          {"response_format", {{"type", "json_object"}}}}, 400)["error"]["param"], "json_schema");
    EXPECT_EQ(post(c, "/v1/completions", {{"prompt", "x"}, {"json_schema", "{}"}}, 400)["error"]["param"], "json_schema");
    // As llama-server: any value's schema, and beside response_format text.
    const json word = post(c, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 30}, {"seed", 2},
                                                  {"json_schema", {{"enum", {"yes", "no"}}}}, {"response_format", {{"type", "text"}}}});
    EXPECT_EQ(word["choices"][0]["finish_reason"], "stop") << word;
    const json value = json::parse(word["choices"][0]["text"].get<std::string>());  // whitespace around it allowed
    EXPECT_TRUE(value == "yes" || value == "no") << word;
}

}  // namespace
}  // namespace aqpim
