// Deltas between states: a chain written block by block composes into each state exactly; the
// literals are the new bytes (not the old ones again); the lasting/tail split lets a chain be read
// without the tails of the blocks before its last; hostile ops are errors, never reads out of range.

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "aqpim/error.h"
#include "store/block_entry.h"
#include "store/state_delta.h"

namespace aqpim::store {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes random_bytes(std::size_t n, std::mt19937_64& rng) {
    Bytes b(n);
    for (auto& x : b) x = std::uint8_t(rng());
    return b;
}

/// A state that grows like a KV state: `n_streams` arrays, each extended by `grow` bytes per
/// block, with a header whose counters change, and a "window" of `window` bytes at the end that is
/// replaced every block.
struct GrowingState {
    int n_streams = 6;
    std::size_t grow = 3000, window = 1500;
    std::vector<Bytes> streams;
    Bytes window_bytes;
    std::uint64_t blocks = 0;
    std::mt19937_64 rng{7};

    Bytes next() {
        streams.resize(std::size_t(n_streams));
        for (Bytes& s : streams) {
            const Bytes more = random_bytes(grow, rng);
            s.insert(s.end(), more.begin(), more.end());
        }
        window_bytes = random_bytes(window, rng);
        ++blocks;
        Bytes out;
        for (int i = 0; i < 8; ++i) out.push_back(std::uint8_t(blocks >> (8 * i)));  // a counter
        for (const Bytes& s : streams) {
            for (int i = 0; i < 8; ++i) out.push_back(std::uint8_t(s.size() >> (8 * i)));
            out.insert(out.end(), s.begin(), s.end());
        }
        out.insert(out.end(), window_bytes.begin(), window_bytes.end());
        return out;
    }
};

/// n successive states of g and the deltas between them, each block split as the store splits
/// it (split_lasting by the next block's delta; the last block unsplit).
struct SplitChain {
    std::vector<Bytes> states;
    std::vector<StateDelta> deltas;
};
SplitChain split_chain(GrowingState& g, int n) {
    SplitChain c;
    Bytes prev;
    for (int j = 0; j < n; ++j) {
        c.states.push_back(g.next());
        c.deltas.push_back(diff_states(prev, c.states.back()));
        if (j > 0) split_lasting(c.deltas[std::size_t(j) - 1], c.deltas.back());
        prev = c.states.back();
    }
    return c;
}

/// A delta's view with its lasting and tail parts in buffers of their own (as read from two
/// entries), kept alive for the test.
DeltaView view_of(const StateDelta& d, bool with_tail) {
    static std::vector<std::unique_ptr<Bytes>> keep;
    keep.push_back(std::make_unique<Bytes>(d.literals.begin(), d.literals.begin() + std::ptrdiff_t(d.lasting_bytes)));
    const Bytes& lasting = *keep.back();
    keep.push_back(std::make_unique<Bytes>(d.literals.begin() + std::ptrdiff_t(d.lasting_bytes), d.literals.end()));
    DeltaView v{d.ops, lasting, {}, d.literals.size() - d.lasting_bytes, d.parent_bytes};
    if (with_tail) v.tail = *keep.back();
    return v;
}

TEST(StateDelta, EmptyParentIsAllLiteral) {
    std::mt19937_64 rng(1);
    const Bytes now = random_bytes(1000, rng);
    const StateDelta d = diff_states({}, now);
    ASSERT_EQ(d.ops.size(), 1u);
    EXPECT_FALSE(d.ops[0].copy);
    EXPECT_EQ(d.literals, now);
    EXPECT_EQ(d.output_bytes(), now.size());
    const DeltaView v = view_of(d, true);
    EXPECT_EQ(compose_chain({&v, 1}, 1 << 20), now);
    // and an empty state
    const StateDelta e = diff_states(now, {});
    EXPECT_TRUE(e.ops.empty());
}

TEST(StateDelta, InsertionsAndChangesCostTheirOwnBytes) {
    std::mt19937_64 rng(2);
    const Bytes parent = random_bytes(200000, rng);
    Bytes now;
    // old bytes in order with three insertions, a changed byte and a dropped range
    now.insert(now.end(), parent.begin(), parent.begin() + 50000);
    const Bytes ins1 = random_bytes(777, rng), ins2 = random_bytes(4096, rng), ins3 = random_bytes(5, rng);
    now.insert(now.end(), ins1.begin(), ins1.end());
    now.insert(now.end(), parent.begin() + 50000, parent.begin() + 120000);
    now.insert(now.end(), ins2.begin(), ins2.end());
    now.insert(now.end(), parent.begin() + 130000, parent.end());  // 10000 bytes dropped
    now[150000] ^= 0xff;
    now.insert(now.end(), ins3.begin(), ins3.end());
    const StateDelta d = diff_states(parent, now);
    EXPECT_EQ(d.output_bytes(), now.size());
    // the literals are the inserted bytes and the changed one (a resync may take a few more)
    EXPECT_GE(d.literals.size(), 777u + 4096 + 5 + 1);
    EXPECT_LE(d.literals.size(), 777u + 4096 + 5 + 1 + 256);
    EXPECT_LE(d.ops.size(), 12u);
    const StateDelta d0 = diff_states({}, parent);
    const DeltaView chain[] = {view_of(d0, true), view_of(d, true)};
    EXPECT_EQ(compose_chain(chain, 1 << 20), now);
}

TEST(StateDelta, ChainsComposeWithOnlyTheLastTail) {
    GrowingState g;
    const auto [states, deltas] = split_chain(g, 6);
    for (std::size_t j = 0; j + 1 < deltas.size(); ++j) {
        // a split block's tail is its window (the counter bytes may join it), its lasting part the rest
        const std::uint64_t tail = deltas[j].literals.size() - deltas[j].lasting_bytes;
        EXPECT_GE(tail, g.window) << j;
        EXPECT_LE(tail, g.window + 64) << j;
        EXPECT_LE(deltas[j].lasting_bytes, g.n_streams * (g.grow + 8) + (j == 0 ? 8 : 64)) << j;
    }
    for (std::size_t last = 0; last < deltas.size(); ++last) {
        std::vector<DeltaView> chain;
        for (std::size_t j = 0; j <= last; ++j) chain.push_back(view_of(deltas[j], j == last));
        EXPECT_EQ(compose_chain(chain, 1 << 24), states[last]) << "blocks 0.." << last;
    }
    // the last block's tail withheld: the state cannot be composed (it reads the window)
    std::vector<DeltaView> chain;
    for (std::size_t j = 0; j < 3; ++j) chain.push_back(view_of(deltas[j], false));
    try {
        compose_chain(chain, 1 << 24);
        ADD_FAILURE() << "composed without the last tail";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tail"), std::string::npos) << e.what();
    }
}

TEST(StateDelta, AnOpAcrossTheLastingAndTailPartsReadsBoth) {
    StateDelta d;
    for (std::uint8_t i = 0; i < 10; ++i) d.literals.push_back(i);
    d.lasting_bytes = 4;
    d.ops = {{2, 6, false}, {0, 2, false}, {8, 2, false}};  // lasting 2-3 then tail 4-7, ...
    const DeltaView v = view_of(d, true);
    EXPECT_EQ(compose_chain({&v, 1}, 100), (Bytes{2, 3, 4, 5, 6, 7, 0, 1, 8, 9}));
}

TEST(StateDelta, CopiesNeverReadForbiddenBytes) {
    std::mt19937_64 rng(5);
    const Bytes parent = random_bytes(50000, rng);
    Bytes now = parent;
    now.insert(now.begin() + 20000, 100, 7);
    const std::vector<ByteRange> forbidden = {{1000, 1100}, {10000, 12000}, {30000, 30001}, {49990, 50000}};
    const StateDelta d = diff_states(parent, now, forbidden);
    for (const DeltaOp& op : d.ops)
        if (op.copy)
            for (const ByteRange& f : forbidden)
                EXPECT_TRUE(op.src + op.len <= f.begin || op.src >= f.end) << op.src << "+" << op.len;
    // the forbidden bytes came as literals: about their size more than without the ranges
    EXPECT_GE(d.literals.size(), 100u + 100 + 2000 + 1 + 10);
    EXPECT_LE(d.literals.size(), 100u + 100 + 2000 + 1 + 10 + 4 * 128);
    const StateDelta d0 = diff_states({}, parent);
    const DeltaView chain[] = {view_of(d0, true), view_of(d, true)};
    EXPECT_EQ(compose_chain(chain, 1 << 20), now);
}

TEST(StateDelta, CheckChainFindsTheConsistentPrefix) {
    GrowingState g;
    const auto [states, deltas] = split_chain(g, 4);
    std::vector<DeltaView> chain;
    for (const StateDelta& d : deltas) chain.push_back(view_of(d, false));
    ChainCheck c = check_chain(chain, 1 << 24);
    EXPECT_EQ(c.consistent, 4u);
    EXPECT_TRUE(c.why.empty());
    // a block 2 written against another split of block 1: it copies a byte of block 1's tail
    const std::vector<ByteRange> tail1 = tail_ranges(deltas[1].ops, deltas[1].lasting_bytes);
    ASSERT_FALSE(tail1.empty());
    StateDelta reads_tail;
    reads_tail.parent_bytes = states[1].size();
    reads_tail.ops = {{tail1[0].begin, 1, true}};
    chain[2] = view_of(reads_tail, false);
    chain.resize(3);
    c = check_chain(chain, 1 << 24);
    EXPECT_EQ(c.consistent, 2u);
    EXPECT_TRUE(c.why.empty());
    EXPECT_THROW(compose_chain(chain, 1 << 24), Error);
    // a malformed block names itself
    StateDelta bad;
    bad.parent_bytes = 12345;
    chain[2] = view_of(bad, false);
    c = check_chain(chain, 1 << 24);
    EXPECT_EQ(c.consistent, 2u);
    EXPECT_EQ(c.bad_block, 2u);
    EXPECT_NE(c.why.find("block 2"), std::string::npos) << c.why;
    // a tail cut from the state is the tail the split made
    EXPECT_EQ(tail_of(deltas[1].ops, deltas[1].lasting_bytes, deltas[1].literals.size() - deltas[1].lasting_bytes, states[1]),
              Bytes(deltas[1].literals.begin() + std::ptrdiff_t(deltas[1].lasting_bytes), deltas[1].literals.end()));
}

TEST(StateDelta, LowEntropyBytesStillRoundTrip) {
    Bytes parent(100000, 0), now(120000, 0);
    for (std::size_t i = 0; i < now.size(); i += 1000) now[i] = std::uint8_t(i / 1000);
    const StateDelta a = diff_states({}, parent), b = diff_states(parent, now);
    const DeltaView chain[] = {view_of(a, true), view_of(b, true)};
    EXPECT_EQ(compose_chain(chain, 1 << 20), now);
}

TEST(StateDelta, HostileChainsAreErrors) {
    std::mt19937_64 rng(3);
    const Bytes parent = random_bytes(5000, rng), now = random_bytes(6000, rng);
    StateDelta a = diff_states({}, parent);
    const auto compose = [&](const StateDelta& second) {
        const DeltaView chain[] = {view_of(a, true), view_of(second, true)};
        return compose_chain(chain, 1 << 20);
    };
    const auto expect_error = [&](StateDelta d, const char* what) {
        try {
            compose(d);
            ADD_FAILURE() << "no error: " << what;
        } catch (const Error& e) {
            SCOPED_TRACE(e.what());
        }
    };
    StateDelta d;
    d.parent_bytes = parent.size();
    d.ops = {{4000, 2000, true}};  // copies past the parent's end
    expect_error(d, "copy out of range");
    d.ops = {{~std::uint64_t(0) - 10, 100, true}};
    expect_error(d, "copy offset overflows");
    d.ops = {{0, 10, false}};  // no literal bytes
    expect_error(d, "literal out of range");
    d.literals.assign(10, 1);
    d.lasting_bytes = 10;
    d.ops = {{0, 10, false}, {0, 0, true}};
    expect_error(d, "zero-length op");
    d.ops = {{0, 10, false}, {0, std::uint64_t(1) << 62, true}};
    expect_error(d, "larger than max_bytes");
    d.parent_bytes = 4999;
    d.ops = {{0, 10, false}};
    expect_error(d, "parent size mismatch");
    // a chain fragmented into more pieces than the bound: one-byte copies in reverse order
    StateDelta frag;
    frag.parent_bytes = parent.size();
    for (int rep = 0; rep < 900; ++rep)
        for (std::uint64_t i = parent.size(); i-- > 0;) frag.ops.push_back({i, 1, true});
    expect_error(frag, "too fragmented");
    EXPECT_THROW(compose_chain({}, 100), Error);
}

TEST(BlockEntry, RoundTripAndEveryCorruptionIsAnError) {
    GrowingState g;
    const Bytes s0 = g.next(), s1 = g.next();
    StateDelta d0 = diff_states({}, s0);
    const StateDelta d1 = diff_states(s0, s1);
    split_lasting(d0, d1);
    BlockHeader h;
    h.model_fingerprint = 0x1234;
    h.key = next_block_key({5, 6}, std::vector<std::int32_t>{1, 2, 3});
    h.parent = {5, 6};
    h.index = 0;
    h.block_tokens = 3;
    h.state_checksum = 99;
    const EncodedBlock e = encode_block(h, d0);
    EXPECT_EQ(e.tail.size(), d0.literals.size() - d0.lasting_bytes);
    const DecodedBlock b = decode_block(e.main);
    EXPECT_EQ(b.header.key, h.key);
    EXPECT_EQ(b.header.parent, h.parent);
    EXPECT_EQ(b.header.model_fingerprint, 0x1234u);
    EXPECT_EQ(b.header.state_bytes, s0.size());
    EXPECT_EQ(b.header.tail_bytes, e.tail.size());
    EXPECT_EQ(b.ops.size(), d0.ops.size());
    EXPECT_EQ(Bytes(b.lasting.begin(), b.lasting.end()), Bytes(d0.literals.begin(), d0.literals.begin() + std::ptrdiff_t(d0.lasting_bytes)));
    // every flipped byte and every truncation is refused
    for (std::size_t i = 0; i < e.main.size(); i += 7) {
        Bytes bad = e.main;
        bad[i] ^= 0x10;
        EXPECT_THROW(decode_block(bad), Error) << "flipped byte " << i;
    }
    for (std::size_t n = 0; n < e.main.size(); n += 13)
        EXPECT_THROW(decode_block({e.main.data(), n}), Error) << "truncated to " << n;
    // keys: different tokens, prefixes or parents give different keys
    const std::vector<std::int32_t> t = {1, 2, 3};
    EXPECT_EQ(next_block_key({5, 6}, t), next_block_key({5, 6}, t));
    EXPECT_FALSE(next_block_key({5, 6}, t) == next_block_key({5, 7}, t));
    EXPECT_FALSE(next_block_key({5, 6}, t) == next_block_key({5, 6}, std::vector<std::int32_t>{1, 2, 4}));
    StoreNamespace ns{1, "pq", 1024, 256, 256, "avx2"};
    const BlockKey k0 = namespace_key(ns);
    ns.prefill_chunk = 128;
    EXPECT_FALSE(namespace_key(ns) == k0);
    EXPECT_EQ(main_entry_name(k0).size(), 32u);
    EXPECT_EQ(tail_entry_name(k0), main_entry_name(k0) + ".tail");
}

}  // namespace
}  // namespace aqpim::store
