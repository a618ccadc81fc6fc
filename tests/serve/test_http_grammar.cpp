// GBNF grammars over HTTP (llama-server's `grammar`, vLLM's structured_outputs.grammar and
// guided_grammar; docs/serve.md "Grammars"): a finished text matches the grammar and a cut one is
// a prefix of a match, where the same requests unconstrained match none; nesting (a recursive
// rule) is kept balanced; chat streamed as whole; bad grammars and two constraints refused naming
// the field with the line and column.

#include <gtest/gtest.h>

#include <regex>

#include "serve/grammar.h"
#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;
using test::post;

TEST(HttpGrammar, TheWholeTextMatchesTheGrammar) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine("pq:calib=16,refresh=0,window=4,sinks=2"));
    auto c = s.client();
    const std::string source = "root ::= word (\" \" lower){2,5} [.!]\nword ::= [A-Z] lower\nlower ::= [a-z]+\n";
    const serve::Grammar grammar(source);
    const std::regex oracle("[A-Z][a-z]+( [a-z]+){2,5}[.!]");
    int finished = 0, free_matching = 0;
    for (int seed = 1; seed <= 6; ++seed) {
        json body = {{"prompt", "Catherine said"}, {"max_tokens", 40}, {"temperature", 1.0}, {"seed", seed}};
        const std::string free_text = post(c, "/v1/completions", body)["choices"][0]["text"];
        free_matching += std::regex_match(free_text, oracle);
        if (seed % 3 == 0) body["grammar"] = source;  // llama-server's field
        else if (seed % 3 == 1) body["structured_outputs"] = {{"grammar", source}};  // vLLM's
        else body["guided_grammar"] = source;
        const json choice = post(c, "/v1/completions", body)["choices"][0];
        const std::string text = choice["text"];
        EXPECT_TRUE(serve::GrammarPrefix(grammar).feed(text)) << text;
        if (choice["finish_reason"] == "stop") {
            ++finished;
            EXPECT_TRUE(std::regex_match(text, oracle)) << text;
        }
    }
    EXPECT_GE(finished, 3) << "40 tokens end most sentences";
    EXPECT_LT(free_matching, 2) << "without the grammar the texts do not match";
    // llama-server sends "grammar": "" for none: unconstrained.
    const json none = post(c, "/v1/completions", {{"prompt", "Catherine said"}, {"max_tokens", 8}, {"seed", 1}, {"grammar", ""}});
    EXPECT_EQ(none["choices"][0]["finish_reason"], "length");
}

TEST(HttpGrammar, ARecursiveRuleKeepsTheBracketsBalanced) {
    // A list of words and bracketed lists, nested: no regex says this.
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const std::string source = "root ::= list\nlist ::= \"(\" item (\" \" item){0,3} \")\"\nitem ::= [a-z]{1,8} | list\n";
    const serve::Grammar grammar(source);
    int finished = 0, nested = 0;
    for (int seed = 1; seed <= 6; ++seed) {
        const json body = {{"messages", {{{"role", "user"}, {"content", "A list, please."}}}}, {"max_tokens", 80},
                           {"temperature", 1.0}, {"seed", seed}, {"grammar", source}};
        const json choice = post(c, "/v1/chat/completions", body)["choices"][0];
        const std::string text = choice["message"]["content"];
        serve::GrammarPrefix read(grammar);
        EXPECT_TRUE(read.feed(text)) << text;
        int depth = 0, deepest = 0;
        for (const char ch : text) {
            depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
            deepest = std::max(deepest, depth);
            EXPECT_GE(depth, 0) << text;
        }
        if (choice["finish_reason"] == "stop") {
            ++finished;
            EXPECT_TRUE(read.can_end()) << text;
            EXPECT_EQ(depth, 0) << text;
        }
        nested += deepest > 1;
        if (seed == 1) {
            EXPECT_EQ(test::streamed_chat_content(c, body), text) << "streamed as whole";
        }
    }
    EXPECT_GE(finished, 3);
    EXPECT_GE(nested, 1) << "some list holds a list";
}

TEST(HttpGrammar, BadGrammarsAndTwoConstraintsAreRefused) {
    test::TestServer s(test::austen_serve_model(), test::small_engine());
    auto c = s.client();
    const json e = post(c, "/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= word\n"}}, 400);
    EXPECT_EQ(e["error"]["param"], "grammar");
    EXPECT_NE(e["error"]["message"].get<std::string>().find("at line 1, column 10: rule 'word' is used but not defined"), std::string::npos) << e;
    const json left = post(c, "/v1/completions", {{"prompt", "x"}, {"structured_outputs", {{"grammar", "root ::= root \"a\" | \"b\""}}}}, 400);
    EXPECT_EQ(left["error"]["param"], "structured_outputs.grammar");
    EXPECT_NE(left["error"]["message"].get<std::string>().find("left-recursive"), std::string::npos) << left;
    EXPECT_EQ(post(c, "/v1/completions", {{"prompt", "x"}, {"guided_grammar", 7}}, 400)["error"]["param"], "guided_grammar");
    const json two = post(c, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"grammar", "root ::= \"a\""},
                                                      {"response_format", {{"type", "json_object"}}}}, 400);
    EXPECT_NE(two["error"]["message"].get<std::string>().find("one output constraint per request"), std::string::npos) << two;
    const json parked = post(c, "/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= \"a\""}, {"keep_slot", true}}, 400);
    EXPECT_EQ(parked["error"]["param"], "keep_slot");
}

}  // namespace
}  // namespace aqpim
