// The prefix store on its own (states are opaque bytes to it): a recorded chain is found and
// composes into exactly the recorded state; a prompt that leaves the chain where no tail is stored
// restores nothing, writes that tail, and the next one restores the chain; an entry of another
// namespace under a key of ours is foreign, a damaged tail corrupt: both counted and dropped.

#include <gtest/gtest.h>

#include <random>

#include "aqpim/kv_store.h"
#include "store/block_entry.h"
#include "store/prefix_store.h"

namespace aqpim::store {
namespace {

constexpr int kBlock = 4;

/// A state per block end that grows like a KV state: each block appends rows to every stream
/// and replaces a short-lived window.
std::vector<std::uint8_t> state_at(int blocks, std::uint64_t seed) {
    std::vector<std::uint8_t> s;
    for (int stream = 0; stream < 3; ++stream) {
        for (int b = 0; b < blocks; ++b) {
            std::mt19937_64 rng(seed * 1000 + std::uint64_t(stream * 100 + b));
            for (int i = 0; i < 300; ++i) s.push_back(std::uint8_t(rng()));
        }
        std::mt19937_64 window(seed * 7 + std::uint64_t(blocks));
        for (int i = 0; i < 200; ++i) s.push_back(std::uint8_t(window()));
    }
    return s;
}

std::vector<std::int32_t> prompt(int n, int diverge_at = 1 << 30) {
    std::vector<std::int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(i < diverge_at ? i + 10 : i + 5000);
    return p;
}

struct Fixture {
    KvStore* memory = nullptr;
    std::unique_ptr<PrefixStore> store;
    explicit Fixture(std::uint64_t fingerprint = 42) {
        std::vector<std::unique_ptr<KvStore>> tiers;
        tiers.push_back(make_kv_store("memory"));
        memory = tiers[0].get();
        PrefixStore::Options o;
        o.ns = {fingerprint, "test", 64, kBlock, kBlock, "ref"};
        o.max_state_bytes = 1 << 20;
        store = std::make_unique<PrefixStore>(std::move(tiers), o);
    }
    /// Record the blocks of `p` with states of text `seed`, after what `found` restored.
    void record(const std::vector<std::int32_t>& p, std::uint64_t seed, PrefixHit found = {}) {
        const int from = found.blocks;
        auto r = store->recorder(p, {}, std::move(found));
        for (int b = from + 1; b * kBlock <= int(p.size()); ++b) {
            ASSERT_TRUE(r->wants(std::int64_t(b) * kBlock));
            r->record(state_at(b, seed));
        }
        r.reset();
        store->flush();
    }
};

TEST(PrefixStore, ARecordedChainComposesIntoTheRecordedState) {
    Fixture f;
    f.record(prompt(20), 1);  // 5 blocks, the last stored whole
    EXPECT_EQ(f.store->stats().blocks_stored, 5u);
    PrefixHit hit = f.store->lookup(prompt(23));
    EXPECT_EQ(hit.blocks, 5);
    EXPECT_EQ(hit.n_tokens, 20);
    EXPECT_EQ(hit.state, state_at(5, 1));
    // 20 tokens leave no token to feed after 5 blocks: the chain stops at 4, whose tail is not stored
    hit = f.store->lookup(prompt(20));
    EXPECT_EQ(hit.blocks, 0);
    EXPECT_EQ(hit.mains_found, 4);
    EXPECT_EQ(f.store->lookup(prompt(3)).mains_found, 0);  // shorter than a block: nothing to look up
}

TEST(PrefixStore, AChainEndWithoutATailGetsOneFromTheNextPrefill) {
    Fixture f;
    f.record(prompt(20), 1);
    // leaves the chain inside block 2: blocks 0-1 are stored, without tails
    PrefixHit hit = f.store->lookup(prompt(16, 9));
    EXPECT_EQ(hit.blocks, 0);
    EXPECT_EQ(hit.mains_found, 2);
    f.record(prompt(16, 9), 1, std::move(hit));  // its own blocks from 0 (same bytes), block 1 with its tail
    hit = f.store->lookup(prompt(14, 10));
    EXPECT_EQ(hit.blocks, 2);
    EXPECT_EQ(hit.state, state_at(2, 1));
}

TEST(PrefixStore, ForeignAndCorruptEntriesAreCountedAndDropped) {
    Fixture other(7);  // another model
    other.record(prompt(12), 3);
    Fixture f;
    f.record(prompt(12), 1);
    // the other model's block 0 stored under our block 0's name
    const BlockKey ours = next_block_key(namespace_key({42, "test", 64, kBlock, kBlock, "ref"}), prompt(4));
    const BlockKey theirs = next_block_key(namespace_key({7, "test", 64, kBlock, kBlock, "ref"}), prompt(4));
    f.memory->put(main_entry_name(ours), *other.memory->get_one(main_entry_name(theirs)));
    PrefixHit hit = f.store->lookup(prompt(13));
    EXPECT_EQ(hit.blocks, 0);
    PrefixStoreStats st = f.store->stats();
    EXPECT_EQ(st.rejected_foreign, 1u);
    EXPECT_FALSE(f.memory->get_one(main_entry_name(ours)).has_value());  // dropped

    Fixture g;
    g.record(prompt(40), 1);  // block 7 (the 8th) has its tail stored apart
    const BlockKey k7 = [&] {
        BlockKey k = namespace_key({42, "test", 64, kBlock, kBlock, "ref"});
        const std::vector<std::int32_t> p = prompt(40);
        for (int j = 0; j < 8; ++j) k = next_block_key(k, std::span(p).subspan(std::size_t(j) * kBlock, kBlock));
        return k;
    }();
    std::vector<std::uint8_t> tail = *g.memory->get_one(tail_entry_name(k7));
    tail[tail.size() / 2] ^= 1;
    g.memory->put(tail_entry_name(k7), tail);
    hit = g.store->lookup(prompt(33));  // would stop at block 7
    EXPECT_EQ(hit.blocks, 0);           // its tail refused, and no block before it has one
    EXPECT_EQ(g.store->stats().rejected_corrupt, 1u);
    EXPECT_EQ(g.store->lookup(prompt(41)).state, state_at(10, 1));  // the whole chain still composes
}

}  // namespace
}  // namespace aqpim::store
