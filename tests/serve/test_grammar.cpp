// GBNF grammars (serve/grammar.h): whole matches against std::regex for regular grammars and
// against a counter for nested ones, prefixes that can still finish, the refusals with their line
// and column, the bounds, and the token mask against trying every token on a copy.

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "serve/grammar.h"
#include "serve/json_mask_test_util.h"

namespace aqpim {
namespace {

using serve::Grammar;
using serve::GrammarError;
using serve::GrammarPrefix;

bool matches(const Grammar& g, const std::string& text) {
    GrammarPrefix p(g);
    return p.feed(text) && p.can_end();
}

bool is_prefix(const Grammar& g, const std::string& text) {
    GrammarPrefix p(g);
    return p.feed(text);
}

/// The message of the GrammarError `source` raises ("" if it compiles).
std::string refusal(const std::string& source) {
    try {
        Grammar g(source);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "";
}

// llama.cpp's JSON grammar (grammars/json.gbnf), as its README writes it.
const char* const kJson = R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";

TEST(Grammar, LlamaCppsJsonGrammarReadsJson) {
    const Grammar g(kJson);
    for (const char* ok : {"{}", "{\"a\": 1}", "{\"a\": [1, 2.5e3, \"x\\u00e9\", {\"b\": null}], \"c\": true}", "{ \"k\" : \"v\" } ",
                           "{\"deep\": [[[[[[]]]]]]}", "{\"é\": \"ü\"}"})
        EXPECT_TRUE(matches(g, ok)) << ok;
    for (const char* bad : {"[]", "{", "{\"a\" 1}", "{\"a\": 01}", "{\"a\": tru}", "{\"a\": [1,]}", "{'a': 1}", "{\"a\": \"\x01\"}"})
        EXPECT_FALSE(matches(g, bad)) << bad;
    EXPECT_TRUE(is_prefix(g, "{\"a\": [1, {\"b\": "));
    EXPECT_FALSE(is_prefix(g, "{\"a\": ]"));
    GrammarPrefix p(g);
    ASSERT_TRUE(p.feed("{\"a\": 1}"));
    EXPECT_TRUE(p.can_end());
    EXPECT_FALSE(p.complete()) << "whitespace may follow";
}

TEST(Grammar, RegularGrammarsMatchWhatTheirRegexMatches) {
    // Each grammar beside the ECMAScript pattern it spells; texts drawn from the bytes of both.
    struct Case {
        const char* grammar;
        const char* regex;
        const char* bytes;
    };
    const Case cases[] = {
        {"root ::= \"a\" | \"b\" \"c\"*", "a|bc*", "abc"},
        {"root ::= [a-c]+ \"-\" [0-9]{2,3}", "[a-c]+-[0-9]{2,3}", "abcd-019"},
        {"root ::= x x?\nx ::= \"ab\" | [^a-z]", "(ab|[^a-z])(ab|[^a-z])?", "abcZ1"},
        {"root ::= (\"x\" | \"y\"){,3} \"!\"  # at most three", "(x|y){0,3}!", "xyz!"},
        {"root ::= .* \"end\"", "[\\s\\S]*end", "end\nx"},
        {"root ::= \"\\x41\\u00e9\" [\\n\\t]", "A\u00e9[\\n\\t]", "A\xc3\xa9\n\tB"},
        {"root ::= ( \"a\"\n  | \"b\" )+ \"c\"", "(a|b)+c", "abc"},
        {"root ::= [^\\]]{2}", "[^\\]]{2}", "]a-"},
        {"root ::= ", "", "a"},
        {"root ::= a b\na ::= \"\" | \"a\"\nb ::= \"b\"{0}", "a?", "ab"},
    };
    std::mt19937 rng(3);
    for (const Case& c : cases) {
        const Grammar g(c.grammar);
        const std::regex re(c.regex, std::regex::ECMAScript);
        const std::string bytes = c.bytes;
        int matched = 0;
        for (int i = 0; i < 3000; ++i) {
            std::string text;
            for (int k = 0, n = int(rng() % 8); k < n; ++k) text += bytes[rng() % bytes.size()];
            const bool want = std::regex_match(text, re);
            matched += want;
            EXPECT_EQ(matches(g, text), want) << c.grammar << " on '" << text << "'";
        }
        if (std::string(c.regex) != "") {
            EXPECT_GT(matched, 0) << c.grammar;
        }
    }
}

TEST(Grammar, NestingIsHeldExactly) {
    // Balanced brackets: not a regular language. Every prefix that can still balance is one.
    const Grammar g("root ::= (\"(\" root \")\" | \"x\")*");
    std::mt19937 rng(5);
    for (int i = 0; i < 3000; ++i) {
        std::string text;
        for (int k = 0, n = int(rng() % 12); k < n; ++k) text += "()x"[rng() % 3];
        int open = 0;
        bool prefix = true;
        for (const char c : text) {
            open += c == '(' ? 1 : c == ')' ? -1 : 0;
            prefix = prefix && open >= 0;
        }
        EXPECT_EQ(is_prefix(g, text), prefix) << text;
        EXPECT_EQ(matches(g, text), prefix && open == 0) << text;
    }
    // Depth beyond the bound is not read.
    EXPECT_TRUE(is_prefix(g, std::string(Grammar::kMaxDepth - 1, '(')));
    EXPECT_FALSE(is_prefix(g, std::string(Grammar::kMaxDepth + 1, '(')));
    // A call that ends its rule (right recursion: lists) takes no depth: it returns where its
    // rule would (as llama.cpp's stacks do).
    const Grammar list("root ::= \"[\" items \"]\"\nitems ::= \"1\" (\",\" items)?");
    std::string long_list = "[1";
    for (int i = 0; i < 2000; ++i) long_list += ",1";
    EXPECT_TRUE(matches(list, long_list + "]"));
    const Grammar run("root ::= x\nx ::= \"a\" x | \"\"");
    EXPECT_TRUE(matches(run, std::string(5000, 'a')));
}

TEST(Grammar, RulesThatCannotFinishAreCutSoNoPrefixIsADeadEnd) {
    // "b" leads only into a rule that never ends: the grammar reads it as if that branch were not there.
    const Grammar g("root ::= \"a\" | \"b\" loop\nloop ::= \"c\" loop");
    EXPECT_TRUE(matches(g, "a"));
    EXPECT_FALSE(is_prefix(g, "b"));
}

TEST(Grammar, RefusalsNameTheLineAndColumn) {
    const auto expect = [](const std::string& source, const std::string& part) {
        const std::string got = refusal(source);
        EXPECT_NE(got.find(part), std::string::npos) << source << "\n  got: " << got;
    };
    expect("root ::= x", "at line 1, column 10: rule 'x' is used but not defined");
    expect("start ::= \"a\"", "no rule named 'root'");
    expect("root ::= \"a\"\nroot ::= \"b\"", "at line 2, column 1: rule 'root' is defined twice");
    expect("root ::= root \"a\" | \"b\"", "at line 1, column 10: rule 'root' is left-recursive");
    expect("root ::= x root \"a\" | \"b\"\nx ::= \"\"?", "left-recursive");
    expect("root ::= \"a\" root", "matches no text");
    expect("root ::= \"a\\q\"", "at line 1, column 12: unknown escape '\\q'");
    expect("root ::= <think>", "token references (<...>) are not supported");
    expect("root ::= \"a\"{1001}", "a repetition bound above 1000");
    expect("root ::= \"a\"{3,2}", "whose most is below its least");
    expect("root ::= (\"a\"{1000}){1000}", "automaton states");
    expect("root ::= \"a", "a literal without its closing '\"'");
    expect("root ::= [a", "a class without its closing ']'");
    expect("root ::= [z-a]", "a class range whose end is below its start");
    expect("root ::= (\"a\"", "expected ')'");
    expect("root ::= \"\xff\"", "invalid UTF-8");
    expect("root ::= \"\\ud800\"", "U+D800 is not a character");
    expect("root \"a\"", "expected '::=' after 'root'");
    expect("root ::= \"a\" ) \"b\"", "expected a new line after rule 'root'");
    expect("root ::= \"a\"\n  | \"b\"", "at line 2, column 3: expected a rule name");
    expect(std::string(Grammar::kMaxSourceBytes + 1, '#'), "over 65536 bytes");
    // Bounds on work a hostile grammar could make each byte or the parser do.
    expect("root ::= " + std::string(20000, '(') + "\"a\"" + std::string(20000, ')'), "groups nested deeper than 256");
    std::string doubling = "root ::= r0 \"x\"\n";  // 2^18 ways to read nothing before the x
    for (int i = 0; i < 18; ++i) doubling += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " r" + std::to_string(i + 1) + "\n";
    doubling += "r18 ::= \"a\" | \"\"\n";
    expect(doubling, "rule calls before its first character");
    std::string chain = "root ::= ([a-z ] n0)*\n";  // 100 calls after each letter, each returning to an optional x
    for (int i = 0; i < 100; ++i) chain += "n" + std::to_string(i) + " ::= n" + std::to_string(i + 1) + " \"x\"?\n";
    chain += "n100 ::= \"\"\n";
    expect(chain, "rule 'root': after a character or a call it reaches more than 64 readings or 128 rule calls");
    std::string alternatives = "root ::= \"{\" (t0";  // 40 rules as alternatives: within the bounds
    for (int i = 1; i < 40; ++i) alternatives += " | t" + std::to_string(i);
    alternatives += ") \"}\"\n";
    for (int i = 0; i < 40; ++i) alternatives += "t" + std::to_string(i) + " ::= \"tool_" + std::to_string(i) + "\"\n";
    EXPECT_EQ(refusal(alternatives), "");
    expect("root ::= \"x\" (\"y\"?){70}", "rule 'root': after a character");
    expect("root ::= (\"y\"?){70} \"!\"", "the grammar's start holds more than 64 readings");
    expect("root ::= ((\"\"  #" + std::string(60000, 'c') + "\n){1000}){1000}", "repetitions that read more than");
    EXPECT_EQ(refusal("# a comment\nroot ::= \"a\" # another\n\n"), "");
}

TEST(Grammar, TheMaskKeepsExactlyTheTokensACopyReads) {
    // Along random walks of llama.cpp's JSON grammar over a vocabulary of JSON-ish texts.
    const Grammar g(kJson);
    std::mt19937 rng(9);
    const std::vector<std::string> texts = test::with_random_texts({"", "{", "}", "\"", "[", "]", ":", ",", " ", "1", "true", "\n"},
                                                                   rng, "{}[]\":, 0123456789.eE-+truefalsnabc\\\n", 400, 5);
    const serve::GuideVocabulary vocab(texts, 0);
    int finished = 0;
    for (int walk = 0; walk < 12; ++walk) {
        GrammarPrefix p(g);
        std::string written;
        for (int step = 0; step < 40; ++step) {
            if (test::expect_mask_keeps_every_continuation(p, vocab, texts, 0, written) == 0) break;
            std::vector<std::size_t> ok;
            for (std::size_t t = 1; t < texts.size(); ++t) {
                GrammarPrefix next = p;
                if (next.feed(texts[t])) ok.push_back(t);
            }
            if (p.can_end() && rng() % 8 == 0) {
                ++finished;
                EXPECT_TRUE(matches(g, written)) << written;
                break;
            }
            const std::size_t t = ok[rng() % ok.size()];
            ASSERT_TRUE(p.feed(texts[t]));
            written += texts[t];
        }
    }
    EXPECT_GT(finished, 0);
}

}  // namespace
}  // namespace aqpim
