// The serving engine with a KV store (docs/kv-store.md): a prompt that begins with stored blocks
// restores them and then generates exactly the tokens and log probabilities a server without a
// store gives (pq, f16, q8_0 on austen-13m); a second engine on the same disk tier (a replica)
// does too; a corrupt entry is counted and prefilled around; parked sequences go to disk when
// the budget needs their room and come back with their next request.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "aqpim/error.h"
#include "aqpim/model.h"
#include "serve/engine_test_util.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModel = "models/austen-13m/austen-13m-f16.gguf";

const LoadedModel& austen() {
    static const LoadedModel m = load_model(test::shared_path(kModel));
    return m;
}

serve::EngineOptions options(const std::string& kv, std::vector<std::string> store) {
    serve::EngineOptions o;
    o.kv = kv;
    o.ctx = 1024;
    o.parallel = 2;
    o.threads = 1;
    o.prefill_chunk = 64;
    o.kv_store_block = 128;
    o.kv_store = std::move(store);
    o.cache_prompt = false;  // what the store restores is measured here, and the pages it leaves
    return o;
}

serve::GenerationRequest request(std::vector<std::int32_t> prompt) {
    serve::GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = 12;
    r.sampler.temperature = 0.8f;
    r.sampler.seed = 5;
    r.top_logprobs = 2;
    return r;
}

/// Tokens and log probabilities (with the alternatives') of a request.
std::vector<float> trace(serve::Engine& e, const serve::GenerationRequest& r) {
    auto c = test::submit_collect(e, r);
    c->wait();
    std::vector<float> t;
    for (const serve::TokenEvent& ev : c->events) {
        if (ev.finish != serve::FinishReason::none) break;
        t.push_back(float(ev.token));
        t.push_back(ev.logprob);
        for (const auto& a : ev.top_logprobs) t.push_back(float(a.token)), t.push_back(a.logprob);
    }
    return t;
}

/// A prompt of n tokens that starts with `shared` tokens of the salt-1 prompt.
std::vector<std::int32_t> prompt_sharing(int n, int shared, int salt) {
    std::vector<std::int32_t> p = test::test_prompt(n, salt, austen().weights.config.n_vocab);
    const std::vector<std::int32_t> base = test::test_prompt(shared, 1, austen().weights.config.n_vocab);
    std::copy(base.begin(), base.end(), p.begin());
    return p;
}

void check_restores_exactly(const std::string& kv) {
    const auto& m = austen();
    const serve::GenerationRequest long_prompt = request(prompt_sharing(900, 900, 1));
    const serve::GenerationRequest other_end = request(prompt_sharing(600, 450, 2));  // shares 3 whole blocks
    const serve::GenerationRequest third_end = request(prompt_sharing(600, 450, 3));  // the same 3, then its own
    serve::Engine plain(m.weights, options(kv, {}));
    const std::vector<float> want_long = trace(plain, long_prompt), want_other = trace(plain, other_end),
                             want_third = trace(plain, third_end);

    serve::Engine e(m.weights, options(kv, {"memory"}));
    EXPECT_EQ(trace(e, long_prompt), want_long) << kv << ": recording changed the output";
    e.flush_store();
    store::PrefixStoreStats st = *e.stats().store.prefix;
    EXPECT_EQ(st.blocks_stored, 7u);  // 900 / 128
    EXPECT_EQ(st.lookup_hits, 0u);
    EXPECT_EQ(trace(e, long_prompt), want_long) << kv << ": restored 7 blocks";
    // other_end leaves the stored chain after block 2, whose tail was not stored (tails every 8th
    // block): no hit, and its prefill writes that tail; the next prompt that leaves there restores 3
    // blocks, and other_end again 4 (its own last block, stored whole)
    EXPECT_EQ(trace(e, other_end), want_other) << kv << ": no hit";
    e.flush_store();
    EXPECT_EQ(e.stats().store.prefix->lookup_hits, 1u);
    EXPECT_EQ(trace(e, third_end), want_third) << kv << ": restored 3 blocks";
    e.flush_store();
    EXPECT_EQ(e.stats().store.prefix->tokens_restored, 7u * 128 + 3 * 128);
    EXPECT_EQ(trace(e, other_end), want_other) << kv << ": restored 4 blocks";
    e.flush_store();
    st = *e.stats().store.prefix;
    EXPECT_EQ(st.lookups, 5u);
    EXPECT_EQ(st.lookup_hits, 3u);
    EXPECT_EQ(st.tokens_restored, 7u * 128 + 3 * 128 + 4 * 128);
    EXPECT_EQ(st.blocks_stored, 7u + 1 + 1);  // other_end's and third_end's blocks 3 (block 2 got only its tail)
    EXPECT_EQ(st.rejected_corrupt + st.rejected_foreign, 0u);
    EXPECT_EQ(e.stats().store.restore_refused, 0u);
    EXPECT_EQ(e.stats().pages_in_use, 0);
    EXPECT_EQ(e.stats().kv_bytes_reserved, plain.stats().kv_bytes_reserved);
}

TEST(ServeKvStore, CachePromptFalsePrefillsTheWholePrompt) {
    serve::EngineOptions o = options("f16", {"memory"});
    o.cache_prompt = true;  // the engine keeps a prompt cache; this request asks for neither
    serve::Engine e(austen().weights, o);
    serve::GenerationRequest r = request(prompt_sharing(300, 300, 1));
    EXPECT_EQ(test::submit_collect(e, r)->final_event().n_prompt_fed, 300);
    e.flush_store();
    ASSERT_EQ(e.stats().store.prefix->blocks_stored, 2u);
    r.cache_prompt = false;
    EXPECT_EQ(test::submit_collect(e, r)->final_event().n_prompt_fed, 300);
    EXPECT_EQ(e.stats().store.prefix->lookups, 1u) << "the first request's only";
    r.cache_prompt = true;
    EXPECT_EQ(test::submit_collect(e, r)->final_event().n_prompt_fed, 300 - 256);
    EXPECT_EQ(e.stats().prompt_cache.hits, 0u) << "the same prompt does not begin with a whole cached sequence";
}

TEST(ServeKvStore, RestoredPrefixGivesExactlyThePrefilledOutputPq) {
    AQPIM_REQUIRE_SHARED(kModel);
    check_restores_exactly("pq");  // calib 256, refresh 512: codebook versions trained at the ends of blocks 1 and 5
}

TEST(ServeKvStore, RestoredPrefixGivesExactlyThePrefilledOutputF16AndQ8) {
    AQPIM_REQUIRE_SHARED(kModel);
    check_restores_exactly("f16");
    check_restores_exactly("q8_0");
}

TEST(ServeKvStore, AReplicaOnTheSameDiskTierRestoresAndCorruptEntriesAreCounted) {
    AQPIM_REQUIRE_SHARED(kModel);
    const auto& m = austen();
    const std::string dir = test::temp_path("serve-kv-disk");
    const serve::GenerationRequest r = request(prompt_sharing(520, 520, 1));
    std::vector<float> want;
    {
        serve::Engine first(m.weights, options("pq:bits=2", {"disk:" + dir}));
        want = trace(first, r);
        first.flush_store();
        EXPECT_EQ(first.stats().store.prefix->blocks_stored, 4u);
    }
    serve::Engine second(m.weights, options("pq:bits=2", {"memory", "disk:" + dir}));
    EXPECT_EQ(trace(second, r), want);
    store::PrefixStoreStats st = *second.stats().store.prefix;
    EXPECT_EQ(st.tokens_restored, 4u * 128);
    ASSERT_EQ(st.tiers.size(), 2u);
    EXPECT_EQ(st.tiers[1].hits, 4u);  // four main entries from disk (the last keeps its tail in its main entry)
    // now in memory too: a third lookup reads no disk
    EXPECT_EQ(trace(second, r), want);
    st = *second.stats().store.prefix;
    EXPECT_EQ(st.tiers[1].hits, 4u);

    // corrupt every block entry on disk; a fresh replica finds them, counts them and prefills
    int corrupted = 0;
    for (const auto& f : fs::directory_iterator(dir)) {
        if (!f.is_regular_file()) continue;
        std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(100);
        io.put('\x5a');
        ++corrupted;
    }
    EXPECT_EQ(corrupted, 4);  // four main entries; the last keeps its tail in its main entry, the others have none
    serve::Engine third(m.weights, options("pq:bits=2", {"disk:" + dir}));
    EXPECT_EQ(trace(third, r), want);
    st = *third.stats().store.prefix;
    EXPECT_EQ(st.lookup_hits, 0u);
    EXPECT_EQ(st.rejected_corrupt, 1u);  // block 0: the chain ends there
}

TEST(ServeKvStore, AlternatingContinuationsKeepHittingWithoutCorruption) {
    // Two prompts share 3 blocks and then go their own ways: each writer splits block 2 by its own
    // block 3, so a block 3 must never copy bytes of block 2 that the stored split calls its tail
    // (pq: the window).
    AQPIM_REQUIRE_SHARED(kModel);
    const auto& m = austen();
    const serve::GenerationRequest a = request(prompt_sharing(520, 520, 1));
    const serve::GenerationRequest c = request(prompt_sharing(520, 384, 3));
    serve::Engine plain(m.weights, options("pq", {}));
    const std::vector<float> want_a = trace(plain, a), want_c = trace(plain, c);
    serve::Engine e(m.weights, options("pq", {"memory"}));
    for (int round = 0; round < 3; ++round) {
        EXPECT_EQ(trace(e, a), want_a) << round;
        e.flush_store();
        EXPECT_EQ(trace(e, c), want_c) << round;
        e.flush_store();
    }
    const store::PrefixStoreStats st = *e.stats().store.prefix;
    EXPECT_EQ(st.lookups, 6u);
    EXPECT_EQ(st.lookup_hits, 4u);  // a and c miss once each; then each restores its 4 blocks
    EXPECT_EQ(st.tokens_restored, 4u * 512);
    EXPECT_EQ(st.blocks_stored, 4u + 1);  // a's 4, c's own block 3 (and block 2's tail, not a block)
    EXPECT_EQ(st.rejected_corrupt + st.rejected_foreign + st.inconsistent, 0u);
}

TEST(ServeKvStore, ACacheSaltSharesBlocksOnlyWithTheSameSalt) {
    AQPIM_REQUIRE_SHARED(kModel);
    const auto& m = austen();
    serve::GenerationRequest r = request(prompt_sharing(300, 300, 1));
    serve::Engine plain(m.weights, options("f16", {}));
    const std::vector<float> want = trace(plain, r);
    serve::Engine e(m.weights, options("f16", {"memory"}));
    r.cache_salt = "tenant-a";
    EXPECT_EQ(trace(e, r), want);
    e.flush_store();
    r.cache_salt = "tenant-b";  // the same prompt, another tenant: nothing shared
    EXPECT_EQ(trace(e, r), want);
    r.cache_salt.clear();       // nor with requests without a salt
    EXPECT_EQ(trace(e, r), want);
    EXPECT_EQ(e.stats().store.prefix->lookup_hits, 0u);
    e.flush_store();
    r.cache_salt = "tenant-a";
    EXPECT_EQ(trace(e, r), want);
    EXPECT_EQ(e.stats().store.prefix->lookup_hits, 1u);
    EXPECT_EQ(e.stats().store.prefix->tokens_restored, 256u);  // 2 of 2 whole blocks of 128 (299 tokens to leave one)
}

TEST(ServeKvStore, StoppingWithLookupsQueuedIsClean) {
    AQPIM_REQUIRE_SHARED(kModel);
    const auto& m = austen();
    for (int i = 0; i < 3; ++i) {
        serve::EngineOptions o = options("pq", {"memory"});
        o.parallel = 8;
        serve::Engine e(m.weights, o);
        for (int r = 0; r < 8; ++r) test::submit_collect(e, request(prompt_sharing(600, 300, r)));
        // destroyed at once: queued lookups are dropped, the one running ends before the engine
    }
}

TEST(ServeKvStore, ParkedSequencesGoToDiskForRoomAndComeBack) {
    AQPIM_REQUIRE_SHARED(kModel);
    const auto& m = austen();
    serve::EngineOptions o = options("pq:calib=32,refresh=0,window=8,sinks=4", {"disk:" + test::temp_path("serve-spill")});
    o.parallel = 3;
    o.ctx = 256;
    serve::Engine probe(m.weights, o);
    o.kv_budget_bytes = probe.reservation_bytes(256) * 2 + 4096;  // two sequences of the whole context fit
    serve::Engine e(m.weights, o);

    serve::GenerationRequest a = request(test::test_prompt(40, 3, m.weights.config.n_vocab));
    a.max_tokens = 24;
    serve::EngineOptions po = options("pq:calib=32,refresh=0,window=8,sinks=4", {});
    po.ctx = o.ctx;  // the cache codes by its context (RoPE augmentation reaches it)
    serve::Engine plain(m.weights, po);
    const std::vector<std::int32_t> whole = test::submit_collect(plain, a)->tokens();

    a.max_tokens = 12;
    a.park = true;
    const std::vector<std::int32_t> first = test::submit_collect(e, a)->tokens();  // slot 0, parked
    serve::GenerationRequest big = request(test::test_prompt(100, 4, m.weights.config.n_vocab));
    big.max_tokens = 156;  // the whole context: its reservation needs slot 0's room
    big.park = true;
    test::submit_collect(e, big)->wait();  // slot 1, parked
    EXPECT_EQ(e.slots()[1].phase, serve::SlotPhase::parked);
    auto third = test::submit_collect(e, big);  // needs room: slot 0 goes to disk
    third->wait();
    EXPECT_EQ(third->final_event().finish, serve::FinishReason::length);
    serve::EngineStats st = e.stats();
    EXPECT_GE(st.store.spills, 1u);
    EXPECT_EQ(e.slots()[0].phase, serve::SlotPhase::spilled);
    EXPECT_GT(st.store.spilled_bytes, 0u);

    serve::GenerationRequest more;
    more.resume_slot = 0;
    more.max_tokens = 12;
    auto c = test::submit_collect(e, more);
    std::vector<std::int32_t> joined = first;
    for (std::int32_t t : c->tokens()) joined.push_back(t);
    EXPECT_EQ(c->final_event().finish, serve::FinishReason::length) << c->final_event().error;
    EXPECT_EQ(joined, whole);  // exactly the uninterrupted request
    st = e.stats();
    EXPECT_EQ(st.store.spills, 2u);  // slot 1 made room for it in turn
    EXPECT_EQ(st.store.unspills, 1u);
    EXPECT_EQ(e.slots()[1].phase, serve::SlotPhase::spilled);
    EXPECT_EQ(st.store.spilled_sequences, 1u);
}

TEST(ServeKvStore, BadStoreOptionsAreRefused) {
    AQPIM_REQUIRE_SHARED(kModel);
    serve::EngineOptions o = options("pq", {"memory"});
    o.kv_store_block = 100;  // not a multiple of the prefill chunk (64)
    EXPECT_THROW({ serve::Engine e(austen().weights, o); }, Error);
    o = options("pq", {"tape:/dev/st0"});
    EXPECT_THROW({ serve::Engine e(austen().weights, o); }, Error);
}

}  // namespace
}  // namespace aqpim
