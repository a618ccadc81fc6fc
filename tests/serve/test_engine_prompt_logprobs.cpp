// Prompt scores (GenerationRequest::prompt_logprobs, what `echo` with `logprobs` returns): each
// prompt token's log probability is the model's own log-softmax at the row before it, computed
// by the request's prefill through its scheme's cache.

#include <gtest/gtest.h>

#include <cmath>

#include "aqpim/kv_scheme.h"
#include "aqpim/model.h"
#include "aqpim/transformer.h"
#include "serve/engine_test_util.h"
#include "support/shared_data.h"

namespace aqpim {
namespace {

constexpr const char* kModel = "models/austen-13m/austen-13m-f16.gguf";
constexpr int kChunk = 16;

/// log-softmax of every row of the prompt, prefilled in chunks of kChunk as the engine prefills it.
std::vector<std::vector<float>> reference_log_softmax(const LoadedModel& m, const std::string& kv,
                                                      const std::vector<std::int32_t>& prompt) {
    Transformer t(m.weights, 2);
    KvCacheOptions co;
    co.context = 256;
    auto cache = make_kv_cache(parse_kv_scheme(kv), t.kv_shape(), co);
    cache->add_sequence(0);
    const int n_vocab = m.weights.config.n_vocab;
    std::vector<std::vector<float>> rows;
    std::vector<float> logits;
    for (std::size_t at = 0; at < prompt.size(); at += kChunk) {
        const std::size_t n = std::min<std::size_t>(kChunk, prompt.size() - at);
        const BatchSequence seq{0, std::span<const std::int32_t>(prompt).subspan(at, n), true};
        t.forward({&seq, 1}, *cache, logits);
        for (std::size_t r = 0; r < n; ++r) {
            const float* lg = logits.data() + r * std::size_t(n_vocab);
            const float mx = *std::max_element(lg, lg + n_vocab);
            double sum = 0.0;
            for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(lg[i] - mx));
            std::vector<float> row(static_cast<std::size_t>(n_vocab));
            for (int i = 0; i < n_vocab; ++i) row[std::size_t(i)] = lg[i] - mx - float(std::log(sum));
            rows.push_back(std::move(row));
        }
    }
    return rows;
}

void check_scores(const std::string& kv) {
    const LoadedModel m = load_model(test::shared_path(kModel));
    const int n_vocab = m.weights.config.n_vocab;
    serve::EngineOptions o;
    o.kv = kv;
    o.ctx = 256;
    o.parallel = 2;
    o.prefill_chunk = kChunk;  // 40 prompt tokens: rows of three chunks score the tokens after them
    serve::GenerationRequest r;
    r.prompt = test::test_prompt(40, 5, n_vocab);
    r.max_tokens = 3;
    r.sampler.temperature = 0.9f;
    r.sampler.seed = 17;
    r.top_logprobs = 2;
    r.prompt_logprobs = true;
    serve::Engine e(m.weights, o);
    auto c = test::submit_collect(e, r);
    c->wait();
    ASSERT_GE(c->events.size(), 2u);
    const serve::TokenEvent& first = c->events[0];  // the scores come before any token
    ASSERT_EQ(first.token, -1);
    ASSERT_EQ(first.finish, serve::FinishReason::none);
    ASSERT_EQ(first.prompt.size(), r.prompt.size());
    EXPECT_FALSE(first.prompt[0].logprob.has_value()) << "nothing predicts the first token";

    const auto ref = reference_log_softmax(m, kv, r.prompt);
    double worst = 0.0;
    for (std::size_t i = 1; i < r.prompt.size(); ++i) {
        const serve::ScoredToken& s = first.prompt[i];
        EXPECT_EQ(s.token, r.prompt[i]);
        ASSERT_TRUE(s.logprob.has_value()) << i;
        const std::vector<float>& row = ref[i - 1];
        worst = std::max(worst, std::abs(double(*s.logprob) - row[std::size_t(r.prompt[i])]));
        ASSERT_EQ(s.top.size(), 2u);
        const auto best = std::max_element(row.begin(), row.end()) - row.begin();
        EXPECT_EQ(s.top[0].token, std::int32_t(best)) << i;
        EXPECT_GE(s.top[0].logprob, s.top[1].logprob);
    }
    EXPECT_LT(worst, 1e-4) << kv;
    // Scoring the prompt does not change what follows: the same request without it draws the
    // same tokens from the same logits, to the bit (the last row's product is the same call).
    r.prompt_logprobs = false;
    auto plain = test::submit_collect(e, r);
    EXPECT_EQ(c->tokens(), plain->tokens()) << kv;
    std::vector<float> scored_lp, plain_lp;
    for (const auto& ev : c->events)
        if (ev.token >= 0) scored_lp.push_back(ev.logprob);
    for (const auto& ev : plain->events)
        if (ev.token >= 0) plain_lp.push_back(ev.logprob);
    EXPECT_EQ(scored_lp, plain_lp) << kv;
    EXPECT_EQ(c->final_event().n_prompt, 40);
    // max_tokens 0: the scores, then the end (nothing sampled).
    r.prompt_logprobs = true;
    r.max_tokens = 0;
    auto only = test::submit_collect(e, r);
    only->wait();
    ASSERT_EQ(only->events.size(), 2u);
    EXPECT_EQ(only->events[0].prompt.size(), r.prompt.size());
    EXPECT_EQ(*only->events[0].prompt[7].logprob, *first.prompt[7].logprob);
    EXPECT_EQ(only->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(only->final_event().n_generated, 0);
    r.prompt_logprobs = false;
    serve::SubmitResult refused;
    test::submit_collect(e, r, &refused);
    EXPECT_EQ(refused.rejection, serve::Rejection::invalid) << "max_tokens 0 without scores";
    test::drop_prompt_cache(e);
    EXPECT_EQ(e.stats().pages_in_use, 0);
}

TEST(ServePromptLogprobs, ScoresAreTheModelsLogSoftmaxF16) { check_scores("f16"); }
TEST(ServePromptLogprobs, ScoresAreTheModelsLogSoftmaxPq) { check_scores("pq:calib=24,refresh=0,window=8,sinks=4"); }

TEST(ServePromptLogprobs, AResumedSequenceScoresItsNewPromptFromItsOwnLastToken) {
    const LoadedModel m = load_model(test::shared_path(kModel));
    const int n_vocab = m.weights.config.n_vocab;
    serve::EngineOptions o;
    o.kv = "f16";
    o.ctx = 256;
    o.parallel = 2;
    o.prefill_chunk = kChunk;
    serve::Engine e(m.weights, o);
    serve::GenerationRequest r;
    r.prompt = test::test_prompt(20, 9, n_vocab);
    r.max_tokens = 4;
    r.sampler.temperature = 0.0f;
    r.park = true;
    const std::vector<std::int32_t> generated = test::submit_collect(e, r)->tokens();
    ASSERT_EQ(generated.size(), 4u);

    serve::GenerationRequest more;
    more.resume_slot = 0;
    more.prompt = {7, 8, 9};
    more.max_tokens = 1;
    more.prompt_logprobs = true;
    auto c = test::submit_collect(e, more);
    c->wait();
    const serve::TokenEvent& scores = c->events.at(0);
    ASSERT_EQ(scores.prompt.size(), 3u);
    // The parked sequence's last generated token was never fed: its row predicts the first new token.
    std::vector<std::int32_t> whole = r.prompt;
    whole.insert(whole.end(), generated.begin(), generated.end());
    whole.insert(whole.end(), more.prompt.begin(), more.prompt.end());
    const auto ref = reference_log_softmax(m, "f16", whole);
    for (std::size_t i = 0; i < 3; ++i) {
        const std::size_t at = r.prompt.size() + generated.size() + i;
        ASSERT_TRUE(scores.prompt[i].logprob.has_value()) << i;
        EXPECT_NEAR(*scores.prompt[i].logprob, ref[at - 1][std::size_t(whole[at])], 1e-4) << i;
    }
}

}  // namespace
}  // namespace aqpim
