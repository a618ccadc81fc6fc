// A request's tokens do not depend on what else the engine batches with it (issue 19).

#include <gtest/gtest.h>

#include "aqpim/model.h"
#include "serve/engine_test_util.h"
#include "support/shared_data.h"

namespace aqpim {
namespace {

constexpr const char* kModel = "models/austen-13m/austen-13m-f16.gguf";
/// PQ that codes after 32 tokens, so the prompts below are attended through codes.
constexpr const char* kPq = "pq:calib=32,refresh=0,window=8,sinks=4";

serve::GenerationRequest request(int prompt_len, int salt, int n_vocab, int max_tokens) {
    serve::GenerationRequest r;
    r.prompt = test::test_prompt(prompt_len, salt, n_vocab);
    r.max_tokens = max_tokens;
    r.sampler.temperature = 0.9f;
    r.sampler.top_p = 0.95f;
    r.sampler.seed = 1000 + std::uint64_t(salt);
    r.top_logprobs = 2;
    return r;
}

void check_alone_equals_batched(const std::string& kv, int n_others) {
    const LoadedModel m = load_model(test::shared_path(kModel));
    const int n_vocab = m.weights.config.n_vocab;
    serve::EngineOptions o;
    o.kv = kv;
    o.kv_budget_bytes = 256ULL << 20;
    o.parallel = n_others + 1;
    o.prefill_chunk = 16;  // the target's prompt in 3 chunks
    o.ctx = 256;
    const serve::GenerationRequest target = request(40, 7, n_vocab, 8);
    std::vector<std::int32_t> alone;
    std::vector<float> alone_logprobs;
    {
        serve::Engine e(m.weights, o);
        auto c = test::submit_collect(e, target);
        alone = c->tokens();
        for (const auto& ev : c->events) alone_logprobs.push_back(ev.logprob);
        EXPECT_EQ(c->final_event().finish, serve::FinishReason::length);
    }
    ASSERT_EQ(alone.size(), 8u);
    serve::Engine e(m.weights, o);
    std::vector<std::shared_ptr<test::Collected>> others;
    for (int i = 0; i < n_others / 2; ++i) others.push_back(test::submit_collect(e, request(34 + i % 5, 100 + i, n_vocab, 8)));
    auto c = test::submit_collect(e, target);  // joins mid-flight: prefilled between the others' decode steps
    for (int i = n_others / 2; i < n_others; ++i) others.push_back(test::submit_collect(e, request(34 + i % 5, 100 + i, n_vocab, 8)));
    EXPECT_EQ(c->tokens(), alone) << kv;
    std::vector<float> lp;
    for (const auto& ev : c->events) lp.push_back(ev.logprob);
    EXPECT_EQ(lp, alone_logprobs) << kv;
    for (auto& o2 : others) EXPECT_EQ(o2->tokens().size(), 8u);
    // Another request's tokens differ (the test would pass trivially if every request gave the same).
    EXPECT_NE(others[0]->tokens(), alone);
}

TEST(ServeDeterminism, PqAloneEqualsAmong63Others) {
    AQPIM_REQUIRE_SHARED(kModel);
    check_alone_equals_batched(kPq, 63);
}

TEST(ServeDeterminism, F16AloneEqualsAmong15Others) {
    AQPIM_REQUIRE_SHARED(kModel);
    check_alone_equals_batched("f16", 15);
}

}  // namespace
}  // namespace aqpim
