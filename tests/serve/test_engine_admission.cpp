// Admission under a tiny KV budget (queue full, never fits, waiting for room), cancel frees the
// pages, and the finish reasons stop / length.

#include <gtest/gtest.h>

#include <algorithm>
#include <latch>
#include <mutex>

#include "aqpim/model.h"
#include "serve/engine_test_util.h"
#include "support/shared_data.h"

namespace aqpim {
namespace {

constexpr const char* kModel = "models/austen-13m/austen-13m-f16.gguf";

struct ServeAdmission : ::testing::Test {
    void SetUp() override {
        AQPIM_REQUIRE_SHARED(kModel);
        m = std::make_unique<LoadedModel>(load_model(test::shared_path(kModel)));
        n_vocab = m->weights.config.n_vocab;
    }
    serve::GenerationRequest request(int prompt_len, int max_tokens, int salt = 0) const {
        serve::GenerationRequest r;
        r.prompt = test::test_prompt(prompt_len, salt, n_vocab);
        r.max_tokens = max_tokens;
        r.sampler.temperature = 0.0f;
        return r;
    }
    std::unique_ptr<LoadedModel> m;
    int n_vocab = 0;
};

/// A callback gate: the request holding it blocks the scheduler at its first token until opened.
struct Gate {
    std::latch started{1}, open{1};
    std::once_flag once;
    void hold() {
        std::call_once(once, [&] { started.count_down(); });
        open.wait();
    }
};

TEST_F(ServeAdmission, NeverFitsNamesTheNumbers) {
    serve::EngineOptions o;
    o.kv = "f16";
    o.ctx = 512;
    serve::Engine probe(m->weights, o);
    o.kv_budget_bytes = probe.reservation_bytes(64);  // room for one sequence of 64 tokens
    serve::Engine e(m->weights, o);
    serve::SubmitResult res;
    test::submit_collect(e, request(8, 100), &res);
    ASSERT_EQ(res.rejection, serve::Rejection::never_fits);
    EXPECT_EQ(res.needed_bytes, e.reservation_bytes(108));
    EXPECT_EQ(res.budget_bytes, o.kv_budget_bytes);
    EXPECT_NE(res.message.find(std::to_string(res.needed_bytes)), std::string::npos) << res.message;
    // Beyond the context: invalid, not never_fits.
    test::submit_collect(e, request(8, 600), &res);
    EXPECT_EQ(res.rejection, serve::Rejection::invalid) << res.message;
    // One that fits runs.
    auto c = test::submit_collect(e, request(8, 40), &res);
    ASSERT_TRUE(res.ok()) << res.message;
    EXPECT_EQ(c->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(e.stats().requests_rejected, 2u);
}

TEST_F(ServeAdmission, QueueFullWhileTheBudgetHoldsOne) {
    serve::EngineOptions o;
    o.kv = "f16";
    o.ctx = 512;
    o.parallel = 4;
    o.queue_capacity = 2;
    serve::Engine probe(m->weights, o);
    o.kv_budget_bytes = probe.reservation_bytes(64) * 3 / 2;  // one 64-token request at a time
    serve::Engine e(m->weights, o);
    auto gate = std::make_shared<Gate>();
    serve::SubmitResult res;
    // The first request blocks the scheduler at its first token until the gate opens.
    auto first = std::make_shared<test::Collected>();
    res = e.submit(request(8, 56), [first, gate](const serve::TokenEvent& ev) {
        if (ev.n_generated == 1 && ev.finish == serve::FinishReason::none) gate->hold();
        std::lock_guard<std::mutex> lk(first->mu);
        first->events.push_back(ev);
        if (ev.finish != serve::FinishReason::none) first->done = true, first->cv.notify_all();
        return false;
    });
    ASSERT_TRUE(res.ok());
    gate->started.wait();  // the first runs; the budget has no room for another
    auto second = test::submit_collect(e, request(8, 56, 1), &res);
    ASSERT_TRUE(res.ok());
    auto third = test::submit_collect(e, request(8, 56, 2), &res);
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(e.stats().queued, 2);
    test::submit_collect(e, request(8, 56, 3), &res);
    EXPECT_EQ(res.rejection, serve::Rejection::queue_full);
    EXPECT_NE(res.message.find("queue is full"), std::string::npos) << res.message;
    gate->open.count_down();
    EXPECT_EQ(first->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(second->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(third->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(second->tokens().size(), 56u);
    // The budget holds one sequence: each request dropped the one the prompt cache kept before it.
    EXPECT_EQ(e.stats().prompt_cache.sequences, 1);
    EXPECT_EQ(e.stats().prompt_cache.evictions, 2u);
    EXPECT_EQ(test::drop_prompt_cache(e), 1);
    const serve::EngineStats s = e.stats();
    EXPECT_EQ(s.kv_bytes_used, 0u);
    EXPECT_EQ(s.active, 0);
}

TEST_F(ServeAdmission, CancelFreesThePagesAtOnce) {
    serve::EngineOptions o;
    o.kv = "pq:calib=32,refresh=0,window=8,sinks=4";
    o.ctx = 512;
    o.parallel = 4;
    serve::Engine e(m->weights, o);
    const std::uint64_t base = e.stats().kv_bytes_reserved;
    std::vector<std::shared_ptr<test::Collected>> running;
    std::vector<std::uint64_t> ids;
    auto gate = std::make_shared<Gate>();
    for (int i = 0; i < 3; ++i) {
        auto c = std::make_shared<test::Collected>();
        const serve::SubmitResult res = e.submit(request(48, 400, i), [c, gate](const serve::TokenEvent& ev) {
            if (ev.n_generated == 8 && ev.finish == serve::FinishReason::none) gate->hold();
            std::lock_guard<std::mutex> lk(c->mu);
            c->events.push_back(ev);
            if (ev.finish != serve::FinishReason::none) c->done = true, c->cv.notify_all();
            return false;
        });
        ASSERT_TRUE(res.ok());
        running.push_back(c);
        ids.push_back(res.request_id);
    }
    gate->started.wait();  // all three hold pages (they decode in one batch)
    EXPECT_GT(e.stats().pages_in_use, 0);
    EXPECT_GT(e.stats().kv_bytes_reserved, base);
    for (std::uint64_t id : ids) EXPECT_TRUE(e.cancel(id));
    gate->open.count_down();
    for (auto& c : running) {
        EXPECT_EQ(c->final_event().finish, serve::FinishReason::cancelled);
        EXPECT_LT(c->tokens().size(), 400u);
    }
    const serve::EngineStats s = e.stats();
    // Every page is back in the pool (which keeps it for the next sequence: memory() still counts
    // the pool's free pages as held) and every reservation is released.
    EXPECT_EQ(s.pages_in_use, 0);
    EXPECT_EQ(s.kv_bytes_reserved, base);
    EXPECT_EQ(s.active, 0);
    EXPECT_FALSE(e.cancel(ids[0]));  // finished
}

TEST_F(ServeAdmission, FinishReasons) {
    serve::EngineOptions o;
    o.kv = "f16";
    o.ctx = 256;
    const std::vector<std::int32_t> ref = [&] {
        serve::Engine e(m->weights, o);
        auto c = test::submit_collect(e, request(12, 10));
        EXPECT_EQ(c->final_event().finish, serve::FinishReason::length);
        EXPECT_EQ(c->final_event().n_prompt, 12);
        EXPECT_EQ(c->final_event().n_generated, 10);
        return c->tokens();
    }();
    ASSERT_EQ(ref.size(), 10u);
    serve::Engine e(m->weights, o);
    // A stop sequence: output up to and including it.
    serve::GenerationRequest r = request(12, 10);
    r.stop_sequences = {{ref[2], ref[3]}};
    auto c = test::submit_collect(e, r);
    EXPECT_EQ(c->final_event().finish, serve::FinishReason::stop);
    EXPECT_EQ(c->tokens(), std::vector<std::int32_t>(ref.begin(), ref.begin() + 4));
    // The callback asks to stop (a string stop found by the server).
    auto d = test::submit_collect(e, request(12, 10), nullptr, 3);
    EXPECT_EQ(d->final_event().finish, serve::FinishReason::stop);
    EXPECT_EQ(d->tokens().size(), 3u);
    // EOS: ends with stop, not emitted.
    std::size_t k = 1;
    while (k < ref.size() && std::find(ref.begin(), ref.begin() + std::ptrdiff_t(k), ref[k]) != ref.begin() + std::ptrdiff_t(k)) ++k;
    ASSERT_LT(k, ref.size());
    o.eos_token = ref[k];
    serve::Engine eos(m->weights, o);
    auto f = test::submit_collect(eos, request(12, 10));
    EXPECT_EQ(f->final_event().finish, serve::FinishReason::stop);
    EXPECT_EQ(f->tokens(), std::vector<std::int32_t>(ref.begin(), ref.begin() + std::ptrdiff_t(k)));
}

}  // namespace
}  // namespace aqpim
