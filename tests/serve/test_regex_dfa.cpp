// Patterns as byte automata (serve/regex_dfa.h): the texts they accept equal std::regex's
// (ECMAScript) on random texts and on walks of the automaton, whole and searched; code-point sets accept exactly the UTF-8
// encodings of their members; writable bytes cut the states that could only go on through others;
// refusals name what and where.

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "aqpim/file_io.h"
#include "serve/json_mask_test_util.h"
#include "serve/regex_dfa.h"

namespace aqpim {
namespace {

using serve::RegexDfa;
using serve::RegexError;

std::bitset<256> all_bytes() { return std::bitset<256>().set(); }

/// Whether the automaton accepts `text` whole: every byte leads on and the end is a match.
bool accepts(const RegexDfa& dfa, std::string_view text) {
    std::int32_t s = dfa.start();
    for (const char c : text) {
        s = dfa.next(s, static_cast<unsigned char>(c));
        if (s == RegexDfa::kDead) return false;
    }
    return dfa.accepting(s);
}

/// A text drawn by walking the automaton over `alphabet`'s bytes, stopping at a match now and then:
/// mostly texts it accepts, for the oracle to confirm.
std::string walk(const RegexDfa& dfa, const std::string& alphabet, std::mt19937& rng) {
    std::string text;
    std::int32_t s = dfa.start();
    while (text.size() < 12 && !(dfa.accepting(s) && rng() % 3 == 0)) {
        std::string next;
        for (const char c : alphabet)
            if (dfa.next(s, static_cast<unsigned char>(c)) != RegexDfa::kDead) next += c;
        if (next.empty()) break;
        text += next[rng() % next.size()];
        s = dfa.next(s, static_cast<unsigned char>(text.back()));
    }
    return text;
}

std::string utf8(char32_t c) {
    std::string s;
    if (c < 0x80) s += char(c);
    else if (c < 0x800) s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
    else if (c < 0x10000) s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
    else
        s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F)), s += char(0x80 | ((c >> 6) & 0x3F)),
            s += char(0x80 | (c & 0x3F));
    return s;
}

TEST(RegexDfa, AcceptsWhatStdRegexMatchesWholeAndSearched) {
    const char* patterns[] = {
        "a*b", "^(ab|a)+$", "[a-c]{2,3}x?", "\\d{3}-\\d{2}", "^\\w+@\\w+\\.c$", "(a|b)*abb", ".b", "[^ab]+",
        "a{0,2}b{1,}", "(?:ab)?c|d", "\\s*x", "^a|b$", "c(ol)?r", "[\\d.]+", "(a+)+b", "a.c", "[-a]b", "[a-]+",
        "x|", "(|a)b", "a{2}", "a+?b??", "\\.\\*", "[\\s\\w]{2}", "[^\\d]c", "\\x41|\\u0062",
    };
    const std::string alphabet = "abc01d.-x@r \nAol*";
    std::mt19937 rng(7);
    for (const char* pattern : patterns) {
        SCOPED_TRACE(pattern);
        const RegexDfa whole(pattern, RegexDfa::Match::whole, all_bytes());
        const RegexDfa search(pattern, RegexDfa::Match::search, all_bytes());
        const std::regex oracle(pattern, std::regex::ECMAScript);
        int matched = 0;
        for (int trial = 0; trial < 3000; ++trial) {
            std::string text;
            if (trial % 2) {
                text = walk(whole, alphabet, rng);
            } else {
                const int n = int(rng() % 9);
                for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
            }
            const bool m = std::regex_match(text, oracle), f = std::regex_search(text, oracle);
            ASSERT_EQ(accepts(whole, text), m) << "whole, text \"" << text << "\"";
            ASSERT_EQ(accepts(search, text), f) << "search, text \"" << text << "\"";
            matched += m;
        }
        EXPECT_GT(matched, 100) << "the walks should often match";
        EXPECT_LT(matched, 3000) << "the random texts should not all match";
    }
}

TEST(RegexDfa, NamedGroupsAndLazyQuantifiersMatchAsPlainOnes) {
    const RegexDfa named("(?<n>a|bc)d+?", RegexDfa::Match::whole, all_bytes());
    for (const char* text : {"ad", "bcdd", "a", "bd", "abcd", ""})
        EXPECT_EQ(accepts(named, text), std::regex_match(text, std::regex("(?:a|bc)d+"))) << text;
}

TEST(RegexDfa, CodePointSetsAcceptExactlyTheirMembersAsUtf8) {
    struct Case {
        const char* pattern;
        bool (*member)(char32_t);
    };
    const Case cases[] = {
        {".", [](char32_t c) { return c != '\n' && c != '\r' && c != 0x2028 && c != 0x2029; }},
        {"[\\u00e0-\\u4e00\\u{1F600}-\\u{1F64F}x]", [](char32_t c) { return (c >= 0xE0 && c <= 0x4E00) || (c >= 0x1F600 && c <= 0x1F64F) || c == 'x'; }},
        {"[^a\\u07ff-\\u0800]", [](char32_t c) { return c != 'a' && c != 0x7FF && c != 0x800; }},
        {"\\S", [](char32_t c) {
             return !(c == 0x20 || (c >= 9 && c <= 13) || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
                      c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF);
         }},
        {"\\ud83d\\ude00|é", [](char32_t c) { return c == 0x1F600 || c == 0xE9; }},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(k.pattern);
        const RegexDfa dfa(k.pattern, RegexDfa::Match::whole, all_bytes());
        for (char32_t c = 0; c <= 0x10FFFF; ++c) {
            if (c >= 0xD800 && c <= 0xDFFF) continue;
            ASSERT_EQ(accepts(dfa, utf8(c)), k.member(c)) << "U+" << std::hex << std::uint32_t(c);
        }
        // Not UTF-8: an overlong form, an encoded surrogate, a stray continuation, a byte past F4.
        for (const char* bad : {"\xC0\x80", "\xC1\xBF", "\xED\xA0\x80", "\x80", "\xF5\x80\x80\x80", "\xE0\x80\x80"})
            EXPECT_FALSE(accepts(dfa, bad));
    }
}

TEST(RegexDfa, UnwritableBytesCutTheStatesOnlyTheyLeadOnFrom) {
    std::bitset<256> writable = all_bytes();
    writable.reset(0x01);
    const RegexDfa dfa("a(\\x01|c)d", RegexDfa::Match::whole, writable);
    std::int32_t s = dfa.next(dfa.start(), 'a');
    ASSERT_NE(s, RegexDfa::kDead);
    EXPECT_EQ(dfa.next(s, 0x01), RegexDfa::kDead);
    EXPECT_TRUE(accepts(dfa, "acd"));
    // Every state next() gives can still reach a match: "a" then "x" is refused at the 'x', not later.
    const RegexDfa literal("ab|ac", RegexDfa::Match::whole, all_bytes());
    EXPECT_EQ(literal.next(literal.next(literal.start(), 'a'), 'x'), RegexDfa::kDead);
    try {
        RegexDfa("a\\x01", RegexDfa::Match::whole, writable);
        FAIL() << "a pattern that only matches an unwritable byte";
    } catch (const RegexError& e) {
        EXPECT_NE(std::string(e.what()).find("matches no text"), std::string::npos) << e.what();
    }
}

TEST(RegexDfa, RefusesWhatItDoesNotImplementNamingWhere) {
    const struct {
        const char* pattern;
        const char* says;
    } cases[] = {
        {"(a)\\1", "at byte 3 of the pattern: back-references"},
        {"a(?=b)", "lookaround"},
        {"a(?<!b)", "lookaround"},
        {"\\bword", "word boundaries"},
        {"a{3,1}", "m below n"},
        {"*a", "at byte 0 of the pattern: nothing to repeat"},
        {"a**", "nothing to repeat"},
        {"(ab", "missing ')'"},
        {"ab)", "unmatched ')'"},
        {"[ab", "missing ']'"},
        {"[b-a]", "out of order"},
        {"a{1001}", "above 1000"},
        {"\\p{L}", "Unicode property"},
        {"a^b", "'^' and '$'"},
        {"(a$)", "'^' and '$'"},
        {"a\\", "ends with"},
        {"\\q", "unknown escape"},
        {"\\012", "octal"},
        {"\xff", "not valid UTF-8"},
        {"(a{1000}){1000}", "more than 50000 automaton states"},
        {"(a|b)*a(a|b){13}", "more than 8192 automaton states"},
        {"(.{0,40}){0,40}", "too complex to compile"},
        {"[^\\s\\S]", "matches no text"},
        {"(?<>x)", "an empty group name"},
        {"(?<1a>x)", "a group name is a letter"},
    };
    for (const auto& c : cases) {
        try {
            RegexDfa(c.pattern, RegexDfa::Match::search, all_bytes());
            ADD_FAILURE() << c.pattern << " compiled";
        } catch (const RegexError& e) {
            EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.pattern << ": " << e.what();
        }
    }
    EXPECT_THROW(RegexDfa(std::string(RegexDfa::kMaxPatternBytes + 1, 'a'), RegexDfa::Match::whole, all_bytes()), RegexError);
    // The transition table's bound: 64 odd bytes make about 130 byte classes, and 4096 states of
    // (a|b)*a(a|b){12} then pass 2 MiB before the bound on states.
    std::string odd = "[";
    for (int b = 1; b < 128; b += 2) odd += "\\x" + std::string(1, "0123456789abcdef"[b / 16]) + "0123456789abcdef"[b % 16];
    try {
        RegexDfa(odd + "]|(a|b)*a(a|b){12}", RegexDfa::Match::whole, all_bytes());
        ADD_FAILURE() << "a table past 2 MiB";
    } catch (const RegexError& e) {
        EXPECT_EQ(std::string(e.what()), "the pattern's automaton needs more than 2 MiB");
    }
    // \u{...} takes leading zeros (its value is bounded, not its digits).
    EXPECT_TRUE(accepts(RegexDfa("\\u{0000041}", RegexDfa::Match::whole, all_bytes()), "A"));
    // A small budget of determinization steps refuses a pattern that fits the state bound.
    EXPECT_THROW(RegexDfa("(a|b)*a(a|b){6}", RegexDfa::Match::whole, all_bytes(), 1000), RegexError);
    EXPECT_NO_THROW(RegexDfa("(a|b)*a(a|b){6}", RegexDfa::Match::whole, all_bytes()));
}

TEST(RegexDfa, AFuzzersSlowPatternIsRefusedByItsWork) {
    // fuzz_openai_request (2026-12-07): a 199-byte structured_outputs regex whose automaton states
    // are large sets took 107 ms (3 s under ASan) to reach the 8192-state bound; its closures' sorts
    // were not counted as work. Now they are, and the work bound refuses it first (about 14 ms).
    const std::string input = aqpim::read_whole_file(std::string(AQPIM_SOURCE_DIR) + "/tests/data/fuzz/openai_request/slow-regex-199-bytes",
                                                     "fuzz input", 4096);
    const std::string body = input.substr(input.rfind("--aqpim-fuzz-part--\n") + 20);
    const std::string pattern = nlohmann::json::parse(body)["structured_outputs"]["regex"];
    ASSERT_EQ(pattern.size(), 199u);
    try {
        RegexDfa(pattern, RegexDfa::Match::whole, all_bytes());
        ADD_FAILURE() << "compiled";
    } catch (const RegexError& e) {
        EXPECT_NE(std::string(e.what()).find("too complex"), std::string::npos) << e.what();
    }
}

TEST(RegexDfa, MaskEqualsTryingEveryTokenWholeAndItsCacheTheWalk) {
    std::mt19937 rng(9);
    const std::vector<std::string> texts =
        test::with_random_texts({"", "Cat", "herine", " was", " here", ".", "!", "C", "a", " ", "yes", "no", "ye"}, rng,
                                "Cathernwsyo .!", 600, 5);
    const std::int32_t eos = 0;
    const serve::GuideVocabulary vocab(texts, eos);
    const RegexDfa sentence("[A-Z][a-z]+( [a-z]+){1,3}[.!]", RegexDfa::Match::whole, all_bytes());
    const std::string doc = "Catherine was here.";
    int kept = 0;
    for (int pass = 0; pass < 2; ++pass)  // the first pass fills the cache, the second reads it
        for (std::size_t cut = 0; cut <= doc.size(); ++cut) {
            serve::RegexPrefix state(sentence);
            ASSERT_TRUE(state.feed(std::string_view(doc).substr(0, cut))) << cut;
            kept += test::expect_mask_keeps_every_continuation(state, vocab, texts, eos, doc.substr(0, cut));
        }
    EXPECT_GT(kept, 300);
    EXPECT_GT(sentence.token_cache().bytes(), 0u);
    // A choice that nothing extends is complete: EOS alone; one that "yes" extends can end or go on.
    const RegexDfa choice("ye|yes|no", RegexDfa::Match::whole, all_bytes());
    for (const char* cut : {"", "y", "ye", "yes", "n", "no"}) {
        serve::RegexPrefix state(choice);
        ASSERT_TRUE(state.feed(cut));
        test::expect_mask_keeps_every_continuation(state, vocab, texts, eos, cut);
    }
    // A chat format's end of turn (a control token: no text) is kept where EOS is, and only there.
    const RegexDfa digits("[0-9]+", RegexDfa::Match::whole, all_bytes());
    const std::vector<std::string> with_control = {"", "", "1", "2", "12", "x"};  // 0: EOS, 1: the end of turn
    const serve::GuideVocabulary control_vocab(with_control, 0);
    for (const char* cut : {"", "1", "12"}) {
        serve::RegexPrefix state(digits);
        ASSERT_TRUE(state.feed(cut));
        std::vector<float> logits(with_control.size(), 1.0f);
        serve::mask_guided(state, control_vocab, logits.data(), int(logits.size()), -1e30f, {1});
        EXPECT_EQ(logits[1] == 1.0f, state.can_end()) << "after '" << cut << "'";
        EXPECT_EQ(logits[0] == 1.0f, state.can_end()) << "EOS the same";
        EXPECT_EQ(logits[2], 1.0f) << "digits go on";
    }
    serve::RegexPrefix yes(choice), ye(choice);
    yes.feed("yes"), ye.feed("ye");
    EXPECT_TRUE(yes.complete());
    EXPECT_TRUE(ye.can_end());
    EXPECT_FALSE(ye.complete());
}

}  // namespace
}  // namespace aqpim
