// The prompt cache (EngineOptions::cache_prompt, llama-server's cache_prompt): a finished sequence
// stays in its slot; a prompt that begins with every token it holds continues it, with exactly the
// tokens of the same conversation parked and continued; other prompts prefill anew; the least
// recently used sequence goes when admission needs a slot or bytes.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/kv_state.h"
#include "aqpim/transformer.h"
#include "serve/prompt_cache_test_util.h"

namespace aqpim {
namespace {

using namespace test::prompt_cache;

TEST(ServePromptCache, TheNextTurnContinuesTheCachedSequenceAsAParkedOneWouldBe) {
    const LoadedModel& m = test::synth_serve_model();
    for (const std::string kv : {"f16", kPq}) {
        const std::vector<std::int32_t> prompt = test::test_prompt(40, 1, m.weights.config.n_vocab);
        const std::vector<std::int32_t> user = words(9, 2);
        serve::Engine e(m.weights, options(kv, 4));
        const std::vector<std::int32_t> reply = test::submit_collect(e, greedy(prompt, 12))->tokens();
        ASSERT_EQ(reply.size(), 12u) << kv;
        EXPECT_EQ(slot_in(e, serve::SlotPhase::cached), 0) << kv;
        EXPECT_EQ(e.stats().prompt_cache.sequences, 1) << kv;
        // The cache holds the prompt and 11 generated tokens (the 12th was drawn, never fed).
        auto next = test::submit_collect(e, greedy(joined(joined(prompt, reply), user), 10));
        const std::vector<std::int32_t> continued = next->tokens();
        const serve::TokenEvent fin = next->final_event();
        EXPECT_EQ(fin.n_prompt, 40 + 12 + 9) << kv;
        EXPECT_EQ(fin.n_prompt_fed, 1 + 9) << kv;
        EXPECT_EQ(fin.slot, 0) << kv;
        const serve::PromptCacheStats st = e.stats().prompt_cache;
        EXPECT_EQ(st.hits, 1u) << kv;
        EXPECT_EQ(st.tokens_reused, 51u) << kv;
        EXPECT_EQ(st.sequences, 1) << kv;  // the continued sequence, cached again
        EXPECT_EQ(st.evictions, 0u) << kv;

        // The same conversation parked and continued (id_slot) computes the same KV: same tokens.
        serve::Engine ref(m.weights, options(kv, 4));
        serve::GenerationRequest first = greedy(prompt, 12);
        first.park = true;
        ASSERT_EQ(test::submit_collect(ref, first)->tokens(), reply) << kv;
        serve::GenerationRequest resume = greedy(user, 10);
        resume.resume_slot = 0;
        EXPECT_EQ(test::submit_collect(ref, resume)->tokens(), continued) << kv;
    }
}

TEST(ServePromptCache, OnlyAPromptBeginningWithTheWholeSequenceOfTheSameSaltContinuesIt) {
    const LoadedModel& m = test::synth_serve_model();
    const std::vector<std::int32_t> prompt = test::test_prompt(30, 3, m.weights.config.n_vocab);
    serve::Engine e(m.weights, options(kPq, 8));
    const std::vector<std::int32_t> reply = test::submit_collect(e, greedy(prompt, 8))->tokens();
    ASSERT_EQ(reply.size(), 8u);
    std::vector<std::int32_t> held = joined(prompt, reply);
    held.pop_back();  // the last token drawn, never fed
    auto fed = [&](serve::GenerationRequest r) {
        auto c = test::submit_collect(e, r);
        const serve::TokenEvent fin = c->final_event();
        EXPECT_EQ(fin.finish, serve::FinishReason::length);
        return fin.n_prompt_fed;
    };
    EXPECT_EQ(fed(greedy(joined(prompt, words(5, 4)), 2)), 35) << "the prompt without the reply";
    EXPECT_EQ(fed(greedy(held, 2)), int(held.size())) << "nothing left to feed after the cached tokens";
    serve::GenerationRequest salted = greedy(joined(held, words(3, 5)), 2);
    salted.cache_salt = "tenant";
    EXPECT_EQ(fed(salted), int(held.size()) + 3) << "another salt";
    serve::GenerationRequest scored = greedy(joined(held, words(3, 6)), 2);
    scored.prompt_logprobs = true;
    EXPECT_EQ(fed(scored), int(held.size()) + 3) << "prompt scores need every row";
    const int kept = e.stats().prompt_cache.sequences;
    serve::GenerationRequest off = greedy(joined(held, words(3, 7)), 2);
    off.cache_prompt = false;
    EXPECT_EQ(fed(off), int(held.size()) + 3) << "cache_prompt false";
    EXPECT_EQ(e.stats().prompt_cache.sequences, kept) << "cache_prompt false keeps nothing";
    EXPECT_EQ(e.stats().prompt_cache.hits, 0u);
    EXPECT_EQ(fed(greedy(joined(held, words(3, 8)), 2)), 3);
    EXPECT_EQ(e.stats().prompt_cache.hits, 1u);
}

TEST(ServePromptCache, TheLeastRecentlyUsedGoesForASlot) {
    const LoadedModel& m = test::synth_serve_model();
    const int n_vocab = m.weights.config.n_vocab;
    serve::Engine e(m.weights, options("f16", 2));
    std::vector<std::vector<std::int32_t>> held;
    for (int i = 0; i < 3; ++i) {
        const std::vector<std::int32_t> prompt = test::test_prompt(20, 10 + i, n_vocab);
        held.push_back(joined(prompt, test::submit_collect(e, greedy(prompt, 4))->tokens()));
    }
    EXPECT_EQ(e.stats().prompt_cache.evictions, 1u);  // the third took the first's slot
    EXPECT_EQ(e.stats().prompt_cache.sequences, 2);
    auto continue_from = [&](int i) {
        return test::submit_collect(e, greedy(joined(held[std::size_t(i)], words(2, 20 + i)), 2))->final_event().n_prompt_fed;
    };
    EXPECT_EQ(continue_from(1), 1 + 2) << "the second is cached";
    EXPECT_EQ(continue_from(0), 24 + 2) << "the first was dropped";
    EXPECT_EQ(e.stats().prompt_cache.evictions, 2u);  // the third, now the least recently used
    EXPECT_EQ(continue_from(2), 24 + 2) << "the third was dropped";
    EXPECT_EQ(e.stats().prompt_cache.hits, 1u);
}

TEST(ServePromptCache, ASequenceContinuedInABudgetOfOneGivesItsOwnRoomUp) {
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o = options(kPq, 4);
    std::uint64_t base = 0, one = 0;
    {
        const serve::Engine probe(m.weights, o);
        base = probe.stats().kv_bytes_used;
        one = probe.reservation_bytes(64);
    }
    o.kv_budget_bytes = base + one;  // one request of 64 tokens at a time
    serve::Engine e(m.weights, o);
    const std::vector<std::int32_t> prompt = test::test_prompt(30, 30, m.weights.config.n_vocab);
    const std::vector<std::int32_t> reply = test::submit_collect(e, greedy(prompt, 10))->tokens();
    auto next = test::submit_collect(e, greedy(joined(joined(prompt, reply), words(4, 31)), 20));
    EXPECT_EQ(next->final_event().n_prompt_fed, 5);
    EXPECT_EQ(e.stats().prompt_cache.evictions, 0u);
    // Another conversation takes the room: the cached one goes.
    EXPECT_EQ(test::submit_collect(e, greedy(test::test_prompt(30, 32, m.weights.config.n_vocab), 34))->final_event().finish,
              serve::FinishReason::length);
    EXPECT_EQ(e.stats().prompt_cache.evictions, 1u);
    EXPECT_EQ(e.stats().prompt_cache.sequences, 1);
    EXPECT_EQ(test::drop_prompt_cache(e), 1);
    EXPECT_EQ(e.stats().kv_bytes_reserved, 0u);
    EXPECT_EQ(e.stats().pages_in_use, 0);
}

/// Whether c's request ends within `limit` (a request that never can is a failure, not a hang).
bool ends_within(test::Collected& c, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lk(c.mu);
    return c.cv.wait_for(lk, limit, [&] { return c.done; });
}

TEST(ServePromptCache, AContinuedSequenceMakesAParkedOneGoToDisk) {
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o = options("f16", 2);  // no idle slot: the head needs none, it continues one
    o.kv_store = {"disk:" + test::temp_path("prompt-cache-spill")};
    std::uint64_t base = 0;
    {
        const serve::Engine probe(m.weights, o);
        base = probe.stats().kv_bytes_used;
        o.kv_budget_bytes = base + probe.reservation_bytes(300);
    }
    serve::Engine e(m.weights, o);
    serve::GenerationRequest parked = greedy(test::test_prompt(200, 50, m.weights.config.n_vocab), 50);
    parked.park = true;
    ASSERT_EQ(test::submit_collect(e, parked)->final_event().finish, serve::FinishReason::length);
    const std::vector<std::int32_t> prompt = test::test_prompt(20, 51, m.weights.config.n_vocab);
    const std::vector<std::int32_t> reply = test::submit_collect(e, greedy(prompt, 5))->tokens();
    // 24 tokens cached; continuing them with 200 more to generate needs the parked sequence's room.
    auto next = test::submit_collect(e, greedy(joined(joined(prompt, reply), words(5, 52)), 200));
    ASSERT_TRUE(ends_within(*next, std::chrono::seconds(60))) << "the request waited for room the disk could give";
    EXPECT_EQ(next->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(next->final_event().n_prompt_fed, 1 + 5);
    EXPECT_EQ(e.stats().store.spills, 1u);
    EXPECT_EQ(slot_in(e, serve::SlotPhase::spilled), 0);
}

TEST(ServePromptCache, ARestoreTakesTheRoomOfCachedSequences) {
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o = options(kPq, 4);
    {
        const serve::Engine probe(m.weights, o);
        o.kv_budget_bytes = probe.stats().kv_bytes_used + probe.reservation_bytes(120);
    }
    serve::Engine e(m.weights, o);
    serve::GenerationRequest first = greedy(test::test_prompt(60, 60, m.weights.config.n_vocab), 40);
    first.park = true;
    const std::vector<std::int32_t> tokens = test::submit_collect(e, first)->tokens();
    const std::string path = test::temp_path("prompt-cache-restore.kvs");
    e.save_slot(0, path);
    e.release_slot(0);
    // A cached sequence of 109 tokens: the budget (120) has no room left for the saved 99.
    ASSERT_EQ(test::submit_collect(e, greedy(test::test_prompt(100, 61, m.weights.config.n_vocab), 10))->tokens().size(), 10u);
    ASSERT_EQ(e.stats().prompt_cache.sequences, 1);
    const int cached = slot_in(e, serve::SlotPhase::cached);
    EXPECT_THROW(e.restore_slot(cached, path + ".missing"), Error);
    EXPECT_EQ(e.slots()[std::size_t(cached)].phase, serve::SlotPhase::cached) << "a failed restore keeps what the slot held";
    const int idle = slot_in(e, serve::SlotPhase::idle);
    e.restore_slot(idle, path);
    EXPECT_EQ(e.slots()[std::size_t(idle)].phase, serve::SlotPhase::parked);
    EXPECT_EQ(e.stats().prompt_cache.sequences, 0);
    EXPECT_EQ(e.stats().prompt_cache.evictions, 1u);
    serve::GenerationRequest more;
    more.resume_slot = idle;
    more.max_tokens = 4;
    EXPECT_EQ(test::submit_collect(e, more)->final_event().finish, serve::FinishReason::length);
    std::filesystem::remove(path);
}

TEST(ServePromptCache, ARestoreThatCannotSucceedGivesNothingUp) {
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o = options("f16", 4);
    {
        const serve::Engine probe(m.weights, o);
        o.kv_budget_bytes = probe.stats().kv_bytes_used + probe.reservation_bytes(120);
    }
    serve::Engine e(m.weights, o);
    ASSERT_EQ(test::submit_collect(e, greedy(test::test_prompt(100, 62, m.weights.config.n_vocab), 10))->tokens().size(), 10u);
    const int cached = slot_in(e, serve::SlotPhase::cached);
    const int idle = slot_in(e, serve::SlotPhase::idle);
    auto expect_refused = [&](const std::string& path, const std::string& why) {
        try {
            e.restore_slot(idle, path);
            ADD_FAILURE() << why << ": restored";
        } catch (const Error& err) {
            EXPECT_NE(std::string(err.what()).find(why), std::string::npos) << err.what();
        }
        EXPECT_EQ(e.slots()[std::size_t(cached)].phase, serve::SlotPhase::cached) << why << ": the cached sequence stays";
        EXPECT_EQ(e.stats().prompt_cache.evictions, 0u) << why;
    };
    // A state of another scheme: refused before the cached sequence gives its room up.
    const std::string other = test::temp_path("restore-other-scheme.kvs");
    {
        serve::Engine q(m.weights, options(kPq, 1));
        serve::GenerationRequest r = greedy(test::test_prompt(60, 63, m.weights.config.n_vocab), 8);
        r.park = true;
        ASSERT_EQ(test::submit_collect(q, r)->tokens().size(), 8u);
        q.save_slot(0, other);
    }
    expect_refused(other, "scheme");
    // A state without its token ids (the format allows it: kv-state.md): a slot could not continue it.
    const std::string no_ids = test::temp_path("restore-no-ids.kvs");
    {
        const KvShape shape = Transformer(m.weights).kv_shape();
        auto c = make_kv_cache(parse_kv_scheme("f16"), shape);
        c->add_sequence(0);
        const std::vector<float> row(std::size_t(shape.n_kv_head * shape.head_dim) * 90, 0.25f);
        for (int il = 0; il < shape.n_layer; ++il) c->append(il, 0, 90, row.data(), row.data());
        save_kv_state_file(no_ids, *c, 0, SlotState{{}, 90, {}}, model_identity(m.weights));
    }
    expect_refused(no_ids, "token ids");
    std::filesystem::remove(other);
    std::filesystem::remove(no_ids);
}

TEST(ServePromptCache, ShortRequestsAfterLongOnesFitWhatAdmissionReserved) {
    // The code pages of long PQ sequences dropped for short ones stay free in the cache's pool; a
    // short sequence's rows are f16 until calibration and cannot use them. Admission let these
    // requests in: the cache gives those pages back rather than refusing (until 2026-12-08 every
    // short request here failed inside its prefill).
    const LoadedModel& m = test::austen_serve_model();
    serve::EngineOptions o = test::small_engine("pq:bits=2");
    o.kv_budget_bytes = 3ULL << 20;
    o.parallel = 6;
    o.ctx = 1024;
    serve::Engine e(m.weights, o);
    const int n_vocab = m.weights.config.n_vocab;
    for (int i = 0; i < 6; ++i) {
        auto c = test::submit_collect(e, greedy(test::test_prompt(990, 200 + i, n_vocab), 10));
        ASSERT_EQ(c->final_event().finish, serve::FinishReason::length) << c->final_event().error;
    }
    ASSERT_EQ(e.stats().prompt_cache.sequences, 6);
    for (int i = 0; i < 6; ++i) {
        auto c = test::submit_collect(e, greedy(test::test_prompt(215, 300 + i, n_vocab), 9));
        EXPECT_EQ(c->final_event().finish, serve::FinishReason::length) << "short request " << i << ": " << c->final_event().error;
        EXPECT_LE(e.stats().kv_bytes_used, o.kv_budget_bytes);
    }
}

TEST(ServePromptCache, OffReleasesEverySequenceAtItsEnd) {
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o = options(kPq, 2);
    o.cache_prompt = false;
    serve::Engine e(m.weights, o);
    const std::vector<std::int32_t> prompt = test::test_prompt(30, 40, m.weights.config.n_vocab);
    const std::vector<std::int32_t> reply = test::submit_collect(e, greedy(prompt, 6))->tokens();
    EXPECT_EQ(slot_in(e, serve::SlotPhase::cached), -1);
    EXPECT_EQ(e.stats().kv_bytes_reserved, 0u);
    EXPECT_EQ(test::submit_collect(e, greedy(joined(joined(prompt, reply), words(2, 41)), 2))->final_event().n_prompt_fed,
              30 + 6 + 2);
    EXPECT_EQ(e.stats().prompt_cache.hits, 0u);
}

}  // namespace
}  // namespace aqpim
