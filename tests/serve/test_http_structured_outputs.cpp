// vLLM's structured outputs over HTTP (`structured_outputs: {"regex" | "choice" | "json"}` and the
// older guided_regex / guided_choice / guided_json): the whole text matches the regex (a finished
// one as std::regex_match says, a cut one a prefix of a match), is one of the choices, streamed as
// whole; the same requests unconstrained do not match; a schema's `pattern` shapes its strings
// and its bounds its numbers; formats and length bounds beside a pattern shape strings; bad
// patterns and two constraints at once are refused naming the field.

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

#include "serve/http_test_util.h"
#include "serve/json_formats.h"
#include "serve/json_schema.h"
#include "serve/regex_dfa.h"

namespace aqpim {
namespace {

using nlohmann::json;
using test::post;

bool regex_prefix(const serve::RegexDfa& dfa, const std::string& text) { return serve::RegexPrefix(dfa).feed(text); }

TEST(HttpStructuredOutputs, TheWholeTextMatchesTheRegex) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine("pq:calib=16,refresh=0,window=4,sinks=2"));
    auto c = s.client();
    const std::string pattern = "[A-Z][a-z]+( [a-z]+){2,5}[.!]";
    const serve::RegexDfa dfa(pattern, serve::RegexDfa::Match::whole, std::bitset<256>().set());
    const std::regex oracle(pattern);
    int finished = 0, free_matching = 0;
    for (int seed = 1; seed <= 6; ++seed) {
        json body = {{"prompt", "Catherine said"}, {"max_tokens", 40}, {"temperature", 1.0}, {"seed", seed}};
        const std::string free_text = post(c, "/v1/completions", body)["choices"][0]["text"];
        free_matching += std::regex_match(free_text, oracle);
        body[seed % 2 ? "structured_outputs" : "guided_regex"] = seed % 2 ? json{{"regex", pattern}} : json(pattern);
        const json choice = post(c, "/v1/completions", body)["choices"][0];
        const std::string text = choice["text"];
        EXPECT_TRUE(regex_prefix(dfa, text)) << text;
        if (choice["finish_reason"] == "stop") {
            ++finished;
            EXPECT_TRUE(std::regex_match(text, oracle)) << text;
        }
    }
    EXPECT_GE(finished, 3) << "40 tokens end most sentences";
    EXPECT_LT(free_matching, 2) << "without the constraint the texts do not match";
    // Chat, streamed: the same content as the whole response.
    json chat = {{"messages", {{{"role", "user"}, {"content", "Say something."}}}}, {"max_tokens", 40}, {"temperature", 0.8},
                 {"seed", 5}, {"structured_outputs", {{"regex", pattern}}}};
    const std::string whole = post(c, "/v1/chat/completions", chat)["choices"][0]["message"]["content"];
    EXPECT_TRUE(regex_prefix(dfa, whole)) << whole;
    EXPECT_EQ(test::streamed_chat_content(c, chat), whole);
}

TEST(HttpStructuredOutputs, AChoiceIsOneOfTheChoices) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const std::vector<std::string> choices = {"yes", "no", "perhaps so", "Mr. Tilney (a clergyman)"};
    std::set<std::string> seen;
    for (int seed = 1; seed <= 12; ++seed) {
        json body = {{"prompt", "Will Catherine go to Bath?"}, {"max_tokens", 30}, {"temperature", 1.5}, {"seed", seed},
                     {seed % 2 ? "guided_choice" : "structured_outputs", seed % 2 ? json(choices) : json{{"choice", choices}}}};
        const json choice = post(c, "/v1/completions", body)["choices"][0];
        const std::string text = choice["text"];
        EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
        EXPECT_EQ(choice["finish_reason"], "stop") << text;
        seen.insert(text);
    }
    EXPECT_GE(seen.size(), 2u) << "the sampler still chooses among them";
    // A choice no other extends ends the request by itself (nothing may follow it).
    const json r = post(c, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Well?"}}}}, {"max_tokens", 30},
                                                     {"temperature", 0}, {"structured_outputs", {{"choice", {"Indeed"}}}}});
    EXPECT_EQ(r["choices"][0]["message"]["content"], "Indeed");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST(HttpStructuredOutputs, JsonSchemasThroughStructuredOutputsAndPatterns) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]{1,8}$"},
        "year": {"type": "string", "pattern": "^1[78][0-9]{2}$"}, "height": {"type": "number", "minimum": 1.2, "maximum": 2.1}},
        "required": ["name", "year", "height"]})";
    const serve::JsonSchema compiled(nlohmann::ordered_json::parse(schema));
    const std::regex name("^[A-Z][a-z]{1,8}$"), year("^1[78][0-9]{2}$");
    int finished = 0;
    for (int seed = 1; seed <= 6; ++seed) {
        const std::string field = seed % 2 ? R"("structured_outputs": {"json": )" + schema + "}" : R"("guided_json": )" + schema;
        const std::string body = R"({"prompt": "Catherine said", "max_tokens": 120, "temperature": 1.0, "seed": )" +
                                 std::to_string(seed) + ", " + field + "}";
        const json choice = test::first_choice_of_text(c, "/v1/completions", body);
        const std::string text = choice.value("text", "");
        EXPECT_TRUE(serve::JsonSchemaPrefix(compiled).feed(text)) << text;
        if (choice["finish_reason"] != "stop") continue;
        ++finished;
        const json v = json::parse(text);
        EXPECT_TRUE(std::regex_match(v["name"].get<std::string>(), name)) << text;
        EXPECT_TRUE(std::regex_match(v["year"].get<std::string>(), year)) << text;
        EXPECT_TRUE(v["height"].get<double>() >= 1.2 && v["height"].get<double>() <= 2.1) << text;
    }
    EXPECT_GE(finished, 3) << "120 tokens finish most of the objects";
}

TEST(HttpStructuredOutputs, FormatsAndLengthBoundsShapeStrings) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const json schema = json::parse(R"({"type": "object", "properties": {"when": {"type": "string", "format": "date"},
        "host": {"type": "string", "format": "hostname", "maxLength": 12},
        "code": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4}}, "required": ["when", "host", "code"]})");
    const serve::JsonSchema compiled(nlohmann::ordered_json::parse(schema.dump()));
    const std::regex date(std::string(serve::find_json_format("date")->regex)),
        host(std::string(serve::find_json_format("hostname")->regex)), code("^[a-z]{2,4}$");
    int finished = 0;
    for (int seed = 1; seed <= 4; ++seed) {
        const json body = {{"messages", {{{"role", "user"}, {"content", "When and where?"}}}}, {"max_tokens", 150},
                           {"temperature", 1.0}, {"seed", seed},
                           {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "visit"}, {"schema", schema}}}}}};
        const json choice = post(c, "/v1/chat/completions", body)["choices"][0];
        const std::string text = choice["message"]["content"];
        EXPECT_TRUE(serve::JsonSchemaPrefix(compiled).feed(text)) << text;
        if (choice["finish_reason"] != "stop") continue;
        ++finished;
        const json v = json::parse(text);
        EXPECT_TRUE(std::regex_match(v["when"].get<std::string>(), date)) << text;
        const std::string h = v["host"];
        EXPECT_TRUE(std::regex_match(h, host) && h.size() <= 12) << text;
        EXPECT_TRUE(std::regex_match(v["code"].get<std::string>(), code)) << text;
    }
    EXPECT_GE(finished, 2) << "150 tokens finish most of the objects";
    const json both = {{"type", "object"}, {"properties", {{"d", {{"type", "string"}, {"format", "date"}, {"pattern", "^2"}}}}}};
    const json e = post(c, "/v1/completions",
                        {{"prompt", "x"}, {"max_tokens", 4},
                         {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "d"}, {"schema", both}}}}}},
                        400)["error"];
    EXPECT_NE(e["message"].get<std::string>().find("/properties/d: \"pattern\" beside the format \"date\""), std::string::npos)
        << e.dump();
}

TEST(HttpStructuredOutputs, RefusesBadPatternsAndTwoConstraints) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const json base = {{"prompt", "x"}, {"max_tokens", 4}};
    const auto refused = [&](const json& extra) {
        json b = base;
        b.update(extra);
        return post(c, "/v1/completions", b, 400)["error"];
    };
    json e = refused({{"structured_outputs", {{"regex", "a(?=b)"}}}});
    EXPECT_EQ(e["param"], "structured_outputs.regex");
    EXPECT_EQ(e["message"], "structured_outputs.regex: at byte 1 of the pattern: lookaround is not supported");
    EXPECT_EQ(refused({{"guided_regex", "(a|b)*a(a|b){13}"}})["message"],
              "guided_regex: the pattern needs more than 8192 automaton states");
    EXPECT_EQ(refused({{"structured_outputs", {{"structural_tag", "{}"}}}})["param"], "structured_outputs.structural_tag");
    EXPECT_EQ(refused({{"guided_choice", json::array()}})["param"], "guided_choice");
    EXPECT_EQ(refused({{"guided_choice", {"a", 1}}})["param"], "guided_choice");
    EXPECT_EQ(refused({{"structured_outputs", "a+"}})["param"], "structured_outputs");
    EXPECT_NE(refused({{"guided_regex", "a"}, {"guided_choice", {"a"}}})["message"].get<std::string>().find("one output constraint"),
              std::string::npos);
    EXPECT_NE(refused({{"guided_regex", "a"}, {"response_format", {{"type", "json_object"}}}})["message"].get<std::string>().find(
                  "one output constraint"),
              std::string::npos);
    EXPECT_EQ(refused({{"guided_json", "{\"type\": \"array\"}"}})["param"], "guided_json");
    EXPECT_EQ(refused({{"guided_regex", "a"}, {"keep_slot", true}})["param"], "keep_slot");
    // A body without constraints still works after them.
    EXPECT_EQ(post(c, "/v1/completions", base)["object"], "text_completion");
}

}  // namespace
}  // namespace aqpim
