// An output constraint after a reasoning model's reasoning (OutputGuide::reason_first, docs/serve.md
// "Reasoning"): the reasoning is free text without EOS, the constraint holds from its </think> on;
// a free start may reason (a first token opening with <think>) or answer at once; a constraint
// that writes <think> itself keeps the whole answer. Hand-checked masks, and the mask against trying every token on a copy along
// random walks.

#include <gtest/gtest.h>

#include <algorithm>
#include <bitset>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "serve/json_mask_test_util.h"
#include "serve/output_guide.h"
#include "serve/regex_dfa.h"

namespace aqpim {
namespace {

using serve::GuideVocabulary;
using serve::OutputGuide;
using serve::ReasoningStart;

constexpr float kDrop = -1e30f;

struct Vocab {
    std::vector<std::string> texts;
    std::int32_t eos;
    GuideVocabulary vocab;
    explicit Vocab(std::vector<std::string> t) : texts(with_eos(std::move(t))), eos(std::int32_t(texts.size()) - 1), vocab(texts, eos) {}
    static std::vector<std::string> with_eos(std::vector<std::string> t) {
        t.push_back("");
        return t;
    }
    std::int32_t id(const std::string& text) const {
        for (std::size_t i = 0; i < texts.size(); ++i)
            if (texts[i] == text) return std::int32_t(i);
        ADD_FAILURE() << "no token '" << text << "'";
        return 0;
    }
    /// The texts the mask keeps (EOS as "<EOS>").
    std::vector<std::string> kept(const OutputGuide& g, const std::vector<std::int32_t>& end_tokens = {}) const {
        std::vector<float> logits(texts.size(), 1.0f);
        g.mask(vocab, logits.data(), int(texts.size()), kDrop, end_tokens);
        std::vector<std::string> out;
        for (std::size_t t = 0; t < texts.size(); ++t)
            if (logits[t] == 1.0f) out.push_back(std::int32_t(t) == eos ? "<EOS>" : texts[t]);
        return out;
    }
};

using Texts = std::vector<std::string>;

const Texts kTexts = {"<", "think", ">", "<think>", "</think>", "</", "think>", "</think>{", "</think>}", "{", "}", "\"a\"", ":",
                      "1", "hello", "\n", "<t", "<think>{"};

TEST(OutputGuideReasoning, AnOpenReasoningIsFreeTextUpToItsCloseThenTheConstraint) {
    const Vocab v(kTexts);
    OutputGuide g;  // JSON mode
    g.reason_first(ReasoningStart::open);
    // Any text but EOS; a </think> only when what follows it in the token can begin the object.
    Texts all = kTexts;
    std::erase(all, "</think>}");
    EXPECT_EQ(v.kept(g), all);
    const std::int32_t end_of_turn = v.id("\n");
    EXPECT_EQ(v.kept(g, {end_of_turn}).size(), all.size() - 1) << "an end of turn is no answer either";
    EXPECT_FALSE(g.complete());
    ASSERT_TRUE(g.feed("hello}"));  // not JSON: the reasoning holds it
    ASSERT_TRUE(g.feed("</"));
    // The tag completed across tokens: "think>" with nothing after it, and not "think>" + more.
    const Texts closing = v.kept(g);
    EXPECT_EQ(std::count(closing.begin(), closing.end(), "think>"), 1);
    ASSERT_TRUE(g.feed("think>"));
    EXPECT_EQ(v.kept(g), (Texts{"{", "\n"})) << "the constraint holds from </think> on (JSON: whitespace first)";
    EXPECT_FALSE(g.feed("hello"));
}

TEST(OutputGuideReasoning, TheAnswerAfterTheCloseIsHeldToTheWholeConstraint) {
    const Vocab v(kTexts);
    OutputGuide g;
    g.reason_first(ReasoningStart::open);
    ASSERT_TRUE(g.feed("</think>{"));  // the close and the answer's first byte in one token
    for (const char* t : {"\"a\"", ":", "1"}) ASSERT_TRUE(g.feed(t));
    EXPECT_FALSE(g.complete());
    EXPECT_EQ(v.kept(g), (Texts{"}", "1", "\n"}));
    ASSERT_TRUE(g.feed("}"));
    EXPECT_TRUE(g.complete());
    EXPECT_EQ(v.kept(g), (Texts{"<EOS>"}));
}

TEST(OutputGuideReasoning, AFreeStartMayReasonOrAnswerAtOnce) {
    const Vocab v(kTexts);
    OutputGuide g;
    g.reason_first(ReasoningStart::free);
    // The object's beginning, or a token that opens with <think> (a reasoning model's vocabulary
    // has it as one token; "<" and "<t" do not start a reasoning).
    EXPECT_EQ(v.kept(g), (Texts{"<think>", "{", "\n", "<think>{"}));
    OutputGuide answered = g;
    ASSERT_TRUE(answered.feed("{"));
    EXPECT_EQ(v.kept(answered), (Texts{"}", "\"a\"", "\n"})) << "answering: the constraint alone";
    EXPECT_FALSE(OutputGuide(g).feed("<"));
    ASSERT_TRUE(g.feed("<think>"));
    const Texts reasoning = v.kept(g);
    EXPECT_EQ(reasoning.size(), kTexts.size() - 1) << "reasoning: any text but a </think> with '}' after it";
    EXPECT_EQ(std::count(reasoning.begin(), reasoning.end(), "<EOS>"), 0);
    ASSERT_TRUE(g.feed("</think>"));
    EXPECT_EQ(v.kept(g), (Texts{"{", "\n"}));
    // Closed: as without reasoning.
    OutputGuide closed;
    closed.reason_first(ReasoningStart::closed);
    EXPECT_EQ(v.kept(closed), (Texts{"{", "\n"}));
}

TEST(OutputGuideReasoning, AConstraintThatWritesThinkKeepsTheWholeAnswer) {
    // A regex that spells the reasoning out (as the tests' answers do) holds it: the text after
    // <think> is the regex's, not free.
    const Vocab v(kTexts);
    const serve::RegexDfa re("<think>[a-z]*</think>1", serve::RegexDfa::Match::whole, std::bitset<256>().set());
    OutputGuide g(re);
    g.reason_first(ReasoningStart::free);
    ASSERT_TRUE(g.feed("<think>"));
    EXPECT_EQ(v.kept(g), (Texts{"<", "think", "</think>", "</", "hello"}));
    ASSERT_TRUE(g.feed("hello"));
    ASSERT_TRUE(g.feed("</think>"));
    EXPECT_EQ(v.kept(g), (Texts{"1"}));
    ASSERT_TRUE(g.feed("1"));
    EXPECT_TRUE(g.complete());
}

TEST(OutputGuideReasoning, TheMaskKeepsExactlyWhatACopyReadsAlongRandomWalks) {
    // Every token but EOS is kept exactly when a copy of the guide reads it; EOS only once the
    // constraint's answer can end. Random vocabularies over the tags' bytes and JSON's.
    std::mt19937 rng(7);
    int finished = 0, reasoned_and_finished = 0;
    for (int round = 0; round < 60; ++round) {
        const Texts texts = test::with_random_texts(kTexts, rng, "<>/thinkab{}\": 1\n", 120, 9);
        const Vocab v(texts);
        const ReasoningStart start = ReasoningStart(round % 3);
        OutputGuide g;
        g.reason_first(start);
        std::string written;
        for (int step = 0; step < 40 && !g.complete(); ++step) {
            std::vector<float> logits(v.texts.size(), 1.0f);
            g.mask(v.vocab, logits.data(), int(v.texts.size()), kDrop);
            std::vector<std::int32_t> kept;
            for (std::int32_t t = 0; t < std::int32_t(v.texts.size()); ++t) {
                if (t == v.eos) continue;
                OutputGuide copy = g;
                const bool reads = !v.texts[std::size_t(t)].empty() && copy.feed(v.texts[std::size_t(t)]);
                EXPECT_EQ(logits[std::size_t(t)] == 1.0f, reads)
                    << "token '" << v.texts[std::size_t(t)] << "' after '" << written << "', start " << int(start);
                if (reads) kept.push_back(t);
            }
            if (kept.empty()) break;
            // Half the draws from the hand-written texts (the tags, JSON's bytes) when any is kept.
            std::vector<std::int32_t> named;
            for (const std::int32_t t : kept)
                if (std::size_t(t) < kTexts.size()) named.push_back(t);
            const std::vector<std::int32_t>& from = named.empty() || rng() % 2 ? kept : named;
            const std::int32_t t = from[rng() % from.size()];
            written += v.texts[std::size_t(t)];
            ASSERT_TRUE(g.feed(v.texts[std::size_t(t)]));
        }
        finished += g.complete();
        reasoned_and_finished += g.complete() && written.find("</think>") != std::string::npos;
        if (g.complete()) {
            EXPECT_EQ(v.kept(g), (Texts{"<EOS>"})) << written;
            // The answer is the object after the reasoning (or the whole text when there was none).
            const std::size_t close = written.find("</think>");
            const bool reasoned = start == ReasoningStart::open || (start == ReasoningStart::free && written.rfind("<think>", 0) == 0);
            EXPECT_TRUE(!reasoned || close != std::string::npos) << written;
        }
    }
    // The walks went through every phase: some answers finished after a reasoning.
    EXPECT_GE(reasoned_and_finished, 5);
    EXPECT_GT(finished, reasoned_and_finished);
    std::printf("%d of 60 walks finished, %d after a reasoning\n", finished, reasoned_and_finished);
}

}  // namespace
}  // namespace aqpim
