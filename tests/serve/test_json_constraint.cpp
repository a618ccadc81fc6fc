// JSON mode's recognizer (JsonPrefix) and token mask (mask_guided): every JSON object is read to
// completion byte by byte, exactly the texts nlohmann::json accepts as one object are (within the
// depth and whitespace bounds), and the mask lets through exactly the tokens that continue the text.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "serve/json_constraint.h"
#include "serve/json_mask_test_util.h"

namespace aqpim {
namespace {

using serve::JsonPrefix;

/// Whether `text` is one whole JSON object to JsonPrefix; `first_bad` gets the byte it refused
/// (text.size() if none).
bool reads_whole(const std::string& text, std::size_t* first_bad = nullptr) {
    JsonPrefix p;
    for (std::size_t i = 0; i < text.size(); ++i)
        if (!p.feed(std::string_view(text).substr(i, 1))) {
            if (first_bad) *first_bad = i;
            return false;
        }
    if (first_bad) *first_bad = text.size();
    return p.complete();
}

TEST(JsonConstraint, ReadsObjectsByteByByteCompleteOnlyAtTheEnd) {
    for (const std::string& text : {
             std::string("{}"),
             std::string(R"({"a":1})"),
             std::string(" {\n  \"a\" : [1, -2.5e+3, 0.0, 1E-7, true, false, null, {\"b\": \"x\\n\\u00e9\\\"\"}],\t\"c\": {}\n} "),
             std::string("{\"k\": \"\xc3\xa9t\xc3\xa9\", \"e\": [], \"z\": -0}"),
         }) {
        JsonPrefix p;
        for (std::size_t i = 0; i < text.size(); ++i) {
            ASSERT_TRUE(p.feed(std::string_view(text).substr(i, 1))) << text << " at " << i;
            const bool rest_is_space = text.find_first_not_of(" \n\t", i + 1) == std::string::npos;
            EXPECT_EQ(p.complete(), rest_is_space && text.find_last_of('}') <= i) << text << " at " << i;
        }
        EXPECT_TRUE(JsonPrefix().feed(text)) << "whole, one call: " << text;
    }
}

TEST(JsonConstraint, RefusesTheByteThatBreaksTheText) {
    struct Case {
        std::string text;
        std::size_t bad;  ///< the refused byte
    };
    for (const Case& c : std::vector<Case>{
             {"[]", 0}, {"\"a\"", 0}, {"{\"a\"}", 4}, {"{\"a\":01}", 6}, {"{\"a\":1.}", 7}, {"{\"a\":tru}", 8},
             {"{,}", 1}, {"{\"a\":1,}", 7}, {"{\"a\":\"\x01\"}", 6}, {"{\"a\":\"\\q\"}", 7}, {"{\"a\":\"\\u12g4\"}", 10},
             {"{} x", 3}, {"{\"a\":-}", 6}, {"{\"a\":1e}", 7}, {"{\"a\":1 2}", 7}, {"{}}", 2}, {"{\"a\"::1}", 5},
             {"{\"a\":[1,]}", 8}, {"{\"a\":[}", 6}, {"{\r}", 1}, {"{\n\n}", 2}}) {
        std::size_t bad = 0;
        EXPECT_FALSE(reads_whole(c.text, &bad)) << c.text;
        EXPECT_EQ(bad, c.bad) << c.text;
    }
}

TEST(JsonConstraint, BoundsDepthAndWhitespace) {
    const int d = JsonPrefix::kMaxDepth;
    std::string deep = "{\"a\":" + std::string(std::size_t(d - 1), '[') + std::string(std::size_t(d - 1), ']') + "}";
    EXPECT_TRUE(reads_whole(deep)) << "depth " << d;
    std::string deeper = "{\"a\":" + std::string(std::size_t(d), '[') + std::string(std::size_t(d), ']') + "}";
    std::size_t bad = 0;
    EXPECT_FALSE(reads_whole(deeper, &bad));
    EXPECT_EQ(bad, 5u + std::size_t(d) - 1) << "the bracket past the depth";
    const std::string ws(std::size_t(JsonPrefix::kMaxWhitespace - 1), ' ');
    EXPECT_TRUE(reads_whole("{\n" + ws + "\"a\": 1}"));
    EXPECT_FALSE(reads_whole("{\n" + ws + " \"a\": 1}"));
}

/// A random JSON value (objects at the top), formatted compactly or with indentation.
nlohmann::json random_value(std::mt19937& rng, int depth) {
    const int kind = depth == 0 ? 0 : int(rng() % (depth > 3 ? 5 : 7));
    switch (kind) {
        case 0: {
            nlohmann::json o = nlohmann::json::object();
            for (int i = 0, n = int(rng() % 4); i < n; ++i) o["k" + std::to_string(rng() % 100)] = random_value(rng, depth + 1);
            return o;
        }
        case 1: return double(int(rng() % 2000) - 1000) / 8.0;
        case 2: return int(rng() % 100000) - 50000;
        case 3: return std::string(1, char('a' + rng() % 26)) + (rng() % 2 ? "\n\"\\\t/" : "");
        case 4: return rng() % 3 == 0 ? nlohmann::json(nullptr) : nlohmann::json(rng() % 2 == 0);
        default: {
            nlohmann::json a = nlohmann::json::array();
            for (int i = 0, n = int(rng() % 4); i < n; ++i) a.push_back(random_value(rng, depth + 1));
            return a;
        }
    }
}

TEST(JsonConstraint, AgreesWithNlohmannOnObjectsAndTheirOneByteMutations) {
    std::mt19937 rng(7);
    const std::string alphabet = "{}[]\":,0123456789.eE+- tfalsenu\\x\n";
    int whole = 0, mutated_valid = 0, mutated = 0;
    for (int i = 0; i < 400; ++i) {
        const std::string text = random_value(rng, 0).dump(rng() % 2 ? -1 : 2);
        ASSERT_TRUE(reads_whole(text)) << text;
        ++whole;
        for (int k = 0; k < 8; ++k) {
            std::string m = text;
            const std::size_t at = rng() % (m.size() + 1);
            const char ch = alphabet[rng() % alphabet.size()];
            switch (rng() % 3) {
                case 0: m.insert(at, 1, ch); break;
                case 1: if (at < m.size()) m.erase(at, 1); break;
                default: if (at < m.size()) m[at] = ch; break;
            }
            // Where the two differ by design: a whitespace run with two newlines (our bound), and an
            // exponent past double's range (nlohmann refuses the number, RFC 8259 does not)
            static const std::regex ours_alone("\n[ \t]*\n"), theirs_alone("[eE][+-]?[0-9]{3,}");
            if (std::regex_search(m, ours_alone) || std::regex_search(m, theirs_alone)) continue;
            const bool theirs = nlohmann::json::accept(m) && nlohmann::json::parse(m).is_object();
            EXPECT_EQ(reads_whole(m), theirs) << nlohmann::json(m).dump();
            mutated_valid += theirs;
            ++mutated;
        }
    }
    EXPECT_EQ(whole, 400);
    EXPECT_GT(mutated_valid, 100) << "some mutations stay valid (a digit, a letter in a string)";
    EXPECT_GT(mutated - mutated_valid, 1000) << "most break the text";
}

TEST(JsonConstraint, MaskLetsThroughExactlyTheContinuationsThenOnlyEos) {
    const serve::GuideVocabulary v({"{", "}", "\"a\"", ":", "1", "x", " ", "", "{\"b\":"}, 7);
    const float drop = -1e30f;
    auto allowed = [&](const JsonPrefix& state) {
        std::vector<float> logits(v.size(), 0.0f);
        serve::mask_guided(state, v, logits.data(), int(logits.size()), drop);
        std::string ids;
        for (std::size_t t = 0; t < logits.size(); ++t)
            if (logits[t] != drop) ids += char('0' + t);
        return ids;
    };
    JsonPrefix p;
    EXPECT_EQ(allowed(p), "068");  // "{", " ", "{\"b\":"
    ASSERT_TRUE(p.feed("{"));
    EXPECT_EQ(allowed(p), "126");  // "}", "\"a\"", " "
    ASSERT_TRUE(p.feed("\"a\""));
    EXPECT_EQ(allowed(p), "36");
    ASSERT_TRUE(p.feed(":"));
    EXPECT_EQ(allowed(p), "02468");  // a value: "{", the string "\"a\"", "1", " ", "{\"b\":"
    ASSERT_TRUE(p.feed("1"));
    EXPECT_EQ(allowed(p), "146");  // "}", more digits, " "
    ASSERT_TRUE(p.feed("}"));
    EXPECT_TRUE(p.complete());
    EXPECT_EQ(allowed(p), "7") << "a complete object: EOS only";
    // No token continues `true` here: EOS stays, so the sampler always has a token.
    JsonPrefix stuck;
    ASSERT_TRUE(stuck.feed("{\"a\":t"));
    EXPECT_EQ(allowed(stuck), "7");
}

TEST(JsonConstraint, TheTrieMaskEqualsTryingEveryTokenWhole) {
    // A vocabulary with shared prefixes, equal texts, empty texts and an EOS, against the plain
    // rule at every prefix of random objects: a token is kept when its whole text continues the
    // state; EOS when the object is complete or nothing else is kept.
    std::mt19937 rng(5);
    const std::string bytes = "{}[]\":, 0123456789.eE-tfalsenu\\xab\n";
    const std::vector<std::string> texts = test::with_random_texts(
        {"", "", "{", "{", "\"", "\": ", "tr", "true", "true}", "1", "12", "1.5e3,", " ", "\n  "}, rng, bytes, 600, 5);
    const std::int32_t eos = 1;
    const serve::GuideVocabulary v(texts, eos);
    int states = 0, kept_total = 0;
    for (int doc = 0; doc < 30; ++doc) {
        const std::string text = random_value(rng, 0).dump(doc % 2 ? -1 : 1);
        for (std::size_t cut = 0; cut <= text.size(); cut += 1 + rng() % 3) {
            JsonPrefix state;
            ASSERT_TRUE(state.feed(std::string_view(text).substr(0, cut)));
            kept_total += test::expect_mask_keeps_every_continuation(state, v, texts, eos, text.substr(0, cut));
            ++states;
        }
    }
    EXPECT_GT(states, 300);
    EXPECT_GT(kept_total, 1000) << "the states let tokens through";
}

}  // namespace
}  // namespace aqpim
