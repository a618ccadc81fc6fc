// The retrieval measurements (aqpim/retrieval.h): the retrieval view's counting, planted needles,
// JSONL parsing, the prompt generator, and the end-to-end mode on a random-weight model.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/retrieval.h"
#include "support/tiny_model.h"

using namespace aqpim;

namespace {

/// Weights over positions 0..pos with `peak` on token t and the rest spread evenly.
std::vector<double> peaked(std::int64_t pos, std::int64_t t, double peak) {
    std::vector<double> w(std::size_t(pos + 1), (1.0 - peak) / double(pos));
    w[std::size_t(t)] = peak;
    return w;
}

std::int64_t word_count(const std::string& s) {
    std::int64_t n = 0;
    bool in = false;
    for (char c : s) {
        const bool space = c == ' ' || c == '\n';
        n += !space && !in;
        in = !space;
    }
    return n;
}

}  // namespace

TEST(RetrievalView, CountsPeakedRowsByDistanceWithKnownAnswers) {
    RetrievalCounter c(100);
    ASSERT_EQ(c.bins().size(), 7u);  // 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64-100
    EXPECT_EQ(c.bins().back().dist_end, 101);
    // pos 50, peak on 45 (distance 5): kept (weight within 10%).
    c.add(peaked(50, 45, 0.8).data(), peaked(50, 45, 0.75).data(), 50);
    // pos 50, peak on 45: same argmax, weight off by 25% -> argmax kept, weight not.
    c.add(peaked(50, 45, 0.8).data(), peaked(50, 45, 0.6).data(), 50);
    // distance 40: the scheme moves the argmax to token 3.
    c.add(peaked(50, 10, 0.7).data(), peaked(50, 3, 0.7).data(), 50);
    // Not counted: below half the weight; on the sink (token 0); on the query's own token.
    c.add(peaked(50, 20, 0.4).data(), peaked(50, 20, 0.4).data(), 50);
    c.add(peaked(50, 0, 0.9).data(), peaked(50, 0, 0.9).data(), 50);
    c.add(peaked(50, 50, 0.9).data(), peaked(50, 50, 0.9).data(), 50);
    EXPECT_EQ(c.n_rows(), 6);
    EXPECT_EQ(c.n_sink_rows(), 1);
    EXPECT_EQ(c.n_self_rows(), 1);
    const RetrievalBin& near = c.bins()[2];  // 4-7
    EXPECT_EQ(near.n_queries, 2);
    EXPECT_EQ(near.n_argmax, 2);
    EXPECT_EQ(near.n_kept, 1);
    const RetrievalBin& far = c.bins()[5];  // 32-63
    EXPECT_EQ(far.n_queries, 1);
    EXPECT_EQ(far.n_argmax, 0);
    const RetrievalBin all = c.all();
    EXPECT_EQ(all.n_queries, 3);
    EXPECT_EQ(all.n_kept, 1);
    RetrievalCounter d(100);
    d.merge(c);
    d.merge(c);
    EXPECT_EQ(d.all().n_queries, 6);
    EXPECT_THROW(RetrievalCounter(50).merge(c), Error);
}

// bits= chooses m from the values too, and a needle among the calibration rows moved that choice
// between the two value patterns (1K tokens, depth 0.1: pq:bits=6 held 26078 vs 73632 bytes of
// codes): the second run takes the first run's m and the weights are read.
TEST(RetrievalNeedles, ABitsCacheHoldsTheSameBytesInBothRuns) {
    NeedleOptions o;
    o.contexts = {1024};
    o.depths = {0.1};
    o.head_dim = 128;
    const auto r = plant_needles({parse_kv_scheme("pq:bits=6")}, o);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_TRUE(r[0].note.empty()) << r[0].note;
    ASSERT_EQ(r[0].results.size(), o.target_weights.size());
    for (const NeedleResult& x : r[0].results) EXPECT_TRUE(std::isfinite(x.scheme_weight));
}

TEST(RetrievalNeedles, ExactSchemesKeepTheNeedleAndTheReadoutIsTheWeight) {
    NeedleOptions o;
    o.contexts = {512, 2048};
    o.depths = {0.2, 0.8};
    o.head_dim = 64;
    const auto r = plant_needles({parse_kv_scheme("f32"), parse_kv_scheme("f16"), parse_kv_scheme("int4:g=32")}, o);
    ASSERT_EQ(r.size(), 3u);
    for (const SchemeNeedles& s : r) {
        EXPECT_TRUE(s.note.empty()) << s.note;
        ASSERT_EQ(s.results.size(), 2u * 2u * o.target_weights.size()) << s.spec;
        for (const NeedleResult& x : s.results) {
            EXPECT_NEAR(x.exact_weight, x.target, 1e-6);  // the query was scaled for the target
            EXPECT_GT(x.needle_pos, 0);
            EXPECT_LT(x.needle_pos, x.context - 1);
        }
    }
    // f32 stores everything exactly: the readout is the exact weight.
    for (const NeedleResult& x : r[0].results) {
        EXPECT_NEAR(x.scheme_weight, x.exact_weight, 1e-4);
        EXPECT_TRUE(x.kept);
    }
    for (const NeedleResult& x : r[1].results) EXPECT_NEAR(x.scheme_weight, x.exact_weight, 0.02);
    // int4 moves the weights (not all equal to the exact ones).
    double worst = 0;
    for (const NeedleResult& x : r[2].results) worst = std::max(worst, std::abs(x.scheme_weight - x.exact_weight));
    EXPECT_GT(worst, 1e-3);
    o.target_weights = {0.4};
    EXPECT_THROW(plant_needles({parse_kv_scheme("f16")}, o), Error);
}

TEST(RetrievalJsonl, ParsesGoodLinesAndNamesTheBadLine) {
    const auto p = parse_retrieval_jsonl(
        "{\"prompt\": \"a b\", \"expected\": \" c\", \"depth\": 0.5, \"ctx\": 64}\n\n  \r\n{\"prompt\":\"x\",\"expected\":\"y\",\"id\":3}\r\n",
        "f.jsonl");
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].prompt, "a b");
    EXPECT_EQ(p[0].expected, " c");
    EXPECT_EQ(p[0].depth, 0.5);
    EXPECT_EQ(p[0].ctx, 64);
    EXPECT_EQ(p[1].depth, -1);
    EXPECT_EQ(parse_retrieval_jsonl(retrieval_prompt_json(p[0]), "again")[0].prompt, "a b");
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"{\"prompt\":\"a\",\"expected\":\"b\"}\n{\"prompt\": \"a\"", "f.jsonl line 2: not valid JSON"},
        {"[1, 2]", "f.jsonl line 1: expected a JSON object"},
        {"\n\n{\"expected\": \"b\"}", "f.jsonl line 3: missing \"prompt\""},
        {"{\"prompt\": 7, \"expected\": \"b\"}", "\"prompt\" must be a string"},
        {"{\"prompt\": \"a\", \"expected\": \"  \"}", "\"expected\" is empty"},
        {"{\"prompt\": \"a\", \"expected\": \"b\", \"depth\": 2}", "\"depth\" must be a number in [0, 1]"},
        {"{\"prompt\": \"a\", \"expected\": \"b\", \"ctx\": -1}", "\"ctx\" must be an integer"},
        {std::string(100, '['), "f.jsonl line 1: JSON nested deeper"},
        {"\n \n", "f.jsonl: no prompts"},
    };
    for (const auto& [text, message] : bad) {
        try {
            parse_retrieval_jsonl(text, "f.jsonl");
            ADD_FAILURE() << "accepted: " << text;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
    }
}

TEST(RetrievalGen, DeterministicAndFitsTheContext) {
    std::string filler;
    for (int i = 0; i < 500; ++i) filler += "word" + std::to_string(i % 97) + (i % 13 == 0 ? ".\n" : " ");
    RetrievalGenOptions o;
    o.contexts = {64, 300};
    o.depths = {0.0, 0.5, 1.0};
    o.per_cell = 2;
    const auto a = generate_retrieval_prompts(filler, word_count, o);
    const auto b = generate_retrieval_prompts(filler, word_count, o);
    ASSERT_EQ(a.size(), 2u * 3u * 2u);
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(retrieval_prompt_json(a[i]), retrieval_prompt_json(b[i]));
        EXPECT_LE(word_count(a[i].prompt) + 1, a[i].ctx);
        EXPECT_GE(word_count(a[i].prompt) + 1, a[i].ctx - 4);
        // The fact's second half is the expected continuation and is in the prompt once.
        const std::size_t at = a[i].prompt.find(a[i].expected.substr(1));
        EXPECT_NE(at, std::string::npos);
        EXPECT_EQ(a[i].prompt.find(a[i].expected.substr(1), at + 1), std::string::npos);
        EXPECT_EQ(a[i].expected.front(), ' ');
    }
    o.seed = 2;
    EXPECT_NE(retrieval_prompt_json(generate_retrieval_prompts(filler, word_count, o)[0]), retrieval_prompt_json(a[0]));
    EXPECT_THROW(generate_retrieval_prompts("too few words", word_count, o), Error);
}

TEST(RetrievalEndToEnd, TinyModelGreedyExactMatchPerScheme) {
    test::TinyModelShape shape;
    shape.n_embd = 64;
    shape.n_head = 2;
    shape.n_kv_head = 1;  // head_dim 32: q4_0 works
    const ModelWeights weights = test::tiny_model(shape, 5);
    Transformer model{weights, 1};
    // A byte-ish tokenizer over the vocabulary: one token per character (mod vocab).
    const int n_vocab = shape.n_vocab;
    const RetrievalTokenizer tok{
        [&](const std::string& t, bool bos) {
            std::vector<std::int32_t> ids;
            if (bos) ids.push_back(1);
            for (unsigned char c : t) ids.push_back(std::int32_t(2 + c % (n_vocab - 2)));
            return ids;
        },
        [&](const std::vector<std::int32_t>& ids) {
            std::string s;
            for (std::int32_t id : ids) s += char('0' + (id - 2 + 100 * (n_vocab - 2)) % (n_vocab - 2) % 75);
            return s;
        }};
    // The expected text is f16's own greedy output for the first prompt (so f16 scores it), and
    // something no model outputs for the second.
    std::vector<RetrievalPrompt> prompts = {{"abcdefgh", "?", 0.5, 8}, {"hgfedcba", "~~~~", -1, -1}};
    const RetrievalReport first = evaluate_retrieval(model, tok, prompts, {parse_kv_scheme("f16")});
    prompts[0].expected = first.schemes[0].outputs[0].substr(0, 2);
    const RetrievalReport r =
        evaluate_retrieval(model, tok, prompts, {parse_kv_scheme("q4_0"), parse_kv_scheme("f32")});
    ASSERT_EQ(r.schemes.size(), 3u);
    EXPECT_EQ(r.schemes[0].spec, "f16");
    EXPECT_TRUE(r.schemes[0].reference);
    for (const SchemeRetrieval& s : r.schemes) {
        EXPECT_EQ(s.n, 2);
        ASSERT_EQ(s.outputs.size(), 2u);
        EXPECT_EQ(s.outputs[0].size(), 2u + 2u);  // as many tokens as expected encodes to, + 2
        ASSERT_EQ(s.by_depth.size(), 1u);        // the prompt without a depth is left out
        EXPECT_EQ(s.by_depth[0].key, 50);
        EXPECT_EQ(s.by_context.size(), 2u);      // ctx 8 given; the other by its 9 tokens
    }
    EXPECT_EQ(r.schemes[0].n_correct, 1);
    EXPECT_EQ(r.schemes[2].n_correct, r.schemes[2].outputs[0].substr(0, 2) == prompts[0].expected);
    EXPECT_NE(retrieval_table(r).find("f16 (ref)"), std::string::npos);
}
