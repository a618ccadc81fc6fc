// Saving and restoring one sequence, cache level, for every scheme make_kv_cache builds: after a
// restore at any point of the schedule (before calibration, as codebooks train, after a refresh
// version, inside the window, past the version bound), memory() equals the original's, attend()
// answers the last position bit-identically, and both caches stay bit-identical as they continue;
// forking a sequence inside a cache; what a restore refuses (budget, used id, another scheme).

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "aqpim/kv_capture.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/kv_state.h"
#include "aqpim/pq_codes.h"
#include "kv/pq_state.h"
#include "support/one_thread.h"
#include "support/random.h"

using namespace aqpim;

namespace {

/// Every scheme, with parameters that cross their boundaries within a few hundred tokens: for pq,
/// calib 40 (version 0 trains at n = 40), window 10, refresh 64 (version 1 trains at n = 104,
/// version 2 at n = 168, the bound of 3), pages of 32 tokens; a dense f16 layer, f16 codebooks,
/// a q4_0 tail, rotations, scale folding, 8-bit codes, contiguous plans (identity permutations),
/// bits= (m chosen per head).
const std::vector<std::string>& all_schemes() {
    static const std::vector<std::string> s = {
        "f32",
        "f16",
        "int8",
        "int4:g=16",
        "int:bits=3,g=8",
        "q8_0",
        "q4_0",
        "kivi2:g=8,window=16",
        "pq:m=8,calib=40,sinks=3,window=10,refresh=64,page=32,versions=3,f16_layers=1",
        "pq:m=8,calib=40,sinks=3,window=10,refresh=64,page=32,versions=3,cb=f16",
        "pq:m=8,calib=40,sinks=3,window=10,refresh=64,page=32,versions=3,cb=int8,rotation=hadamard",
        "pq:m=8,calib=40,sinks=3,window=10,refresh=64,page=32,versions=3,wq=q4_0",
        "pq:m=8,calib=40,sinks=3,window=10,refresh=64,page=32,rotation=hadamard,v_scale=1",
        "pq:m=16,nbits=8,calib=40,sinks=2,window=8,refresh=0,page=64,rotation=random",
        "pq:m=4,calib=24,sinks=0,window=0,refresh=32,page=32,versions=2,order=contiguous,pairs=none,k_scale=0",
        "pq:bits=4,cb=f16,calib=40,sinks=3,window=10,refresh=0,page=32,ctx=400",
        "turbo:bits=2.5,sel=40,window=10",
        "turbo:bits=3,qjl=1",
        "turbo:bits=4,window=16",
        "qjl:m=64,outliers=4,outlier_m=32,sel=40,window=10,values=int2,vg=16",
        "qjl:m=32,values=f16",
    };
    return s;
}

KvShape test_shape() {  // NeoX pairs with frequencies: keys are RoPE-augmented (aug = 3)
    KvShape s{3, 2, 32, RopePairs::neox, {}};
    s.rope_pairs = RopePairs::neox;
    for (int i = 0; i < 16; ++i) s.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * i / 32)));
    return s;
}

struct Data {
    KvShape shape;
    CapturedAttention a;  ///< [n][n_kv_heads][D] keys and values, [n][n_kv_heads * 2][D] queries
};
const Data& data() {
    static const Data d{test_shape(), synthetic_attention(400, 4, 2, 32, 17)};
    return d;
}

std::unique_ptr<KvCache> cache_for(const std::string& spec, std::uint64_t budget = 0) {
    return make_kv_cache(parse_kv_scheme(spec), data().shape, KvCacheOptions{budget, 400});
}

void append(KvCache& c, int seq, int t0, int n) {
    const std::size_t row = 2 * 32;
    for (int il = 0; il < 3; ++il) c.append(il, seq, n, data().a.k.data() + t0 * row, data().a.v.data() + t0 * row);
}

/// Every layer's and head's attention output of the query at position p: [layer][head][2][D].
std::vector<float> attend_at(const KvCache& c, int seq, std::int64_t p) {
    std::vector<float> out(3 * 2 * 2 * 32);
    for (int il = 0; il < 3; ++il)
        for (int ih = 0; ih < 2; ++ih) {
            float* o = out.data() + (il * 2 + ih) * 64;
            const KvQuery q{data().a.q.data() + (p * 4 + ih * 2) * 32, 128, 1, 2, &p, 0.17f, o, 64};
            c.attend(il, seq, ih, q);
        }
    return out;
}

std::vector<std::uint8_t> section(const KvCache& c, int seq) {
    ByteWriter w;
    c.save_sequence(seq, w);
    return w.take();
}

/// Sequence seq holding the first n tokens as a slot holds them: a prefill of n - 1, a decode step.
std::unique_ptr<KvCache> decoded_to(const std::string& spec, int seq, int n) {
    auto c = cache_for(spec);
    c->add_sequence(seq);
    append(*c, seq, 0, n - 1);
    append(*c, seq, n - 1, 1);
    return c;
}

/// The section of a sequence of the first n tokens (and the cache holding it).
std::vector<std::uint8_t> filled_section(const std::string& spec, int n, std::unique_ptr<KvCache>* keep = nullptr) {
    auto c = cache_for(spec);
    c->add_sequence(0);
    append(*c, 0, 0, n);
    std::vector<std::uint8_t> bytes = section(*c, 0);
    if (keep) *keep = std::move(c);
    return bytes;
}

std::unique_ptr<KvCache> restored(const std::string& spec, const std::vector<std::uint8_t>& bytes, int seq = 0) {
    auto c = cache_for(spec);
    ByteReader r(bytes, "test");
    c->restore_sequence(seq, r);
    EXPECT_EQ(r.remaining(), 0u);
    return c;
}

void expect_same_memory(const KvMemory& a, const KvMemory& b) {
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(a.n_tokens, b.n_tokens);
    EXPECT_EQ(a.parts, b.parts);
}

}  // namespace

// Restore at points on each side of every boundary, then continue both caches the same way (a
// chunk, then token by token): every answer bit-identical, memory() the same, and the continued
// caches save the same bytes.
TEST(KvStateCaches, RestoreAnywhereThenContinueBitIdentically) {
    const std::vector<int> points = {2, 30, 40, 47, 104, 120, 175, 300};
    const test::OneThread one;
    for (const std::string& spec : all_schemes()) {
        SCOPED_TRACE(spec);
        auto a = cache_for(spec);
        a->add_sequence(0);
        int n = 0;
        for (int point : points) {
            SCOPED_TRACE(point);
            append(*a, 0, n, point - n - 1);  // a prefill, then a decode step: the state a slot holds
            append(*a, 0, point - 1, 1);
            n = point;
            const std::vector<std::uint8_t> bytes = section(*a, 0);
            auto b = restored(spec, bytes);
            expect_same_memory(b->memory(), a->memory());
            ASSERT_EQ(attend_at(*b, 0, n - 1), attend_at(*a, 0, n - 1));
            // Continue both: 20 tokens at once, then 10 one at a time.
            auto a2 = restored(spec, bytes);
            int m = n;
            for (int step : {20, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
                if (m + step > 400) break;
                append(*a2, 0, m, step);
                append(*b, 0, m, step);
                m += step;
                ASSERT_EQ(attend_at(*b, 0, m - 1), attend_at(*a2, 0, m - 1)) << "at " << m;
            }
            expect_same_memory(b->memory(), a2->memory());
            EXPECT_EQ(section(*b, 0), section(*a2, 0));
        }
    }
}

// The restored cache continues as the original itself does (not only as another restored copy).
TEST(KvStateCaches, RestoredContinuesAsTheOriginal) {
    const test::OneThread one;
    for (const std::string& spec : all_schemes()) {
        SCOPED_TRACE(spec);
        auto a = decoded_to(spec, 0, 100);
        auto b = restored(spec, section(*a, 0));
        for (int t = 100; t < 190; t += 9) {
            append(*a, 0, t, 9);
            append(*b, 0, t, 9);
            ASSERT_EQ(attend_at(*b, 0, t + 8), attend_at(*a, 0, t + 8)) << "at " << t + 9;
        }
        expect_same_memory(b->memory(), a->memory());
    }
}

TEST(KvStateCaches, ForkCopiesASequenceThatThenContinuesOnItsOwn) {
    const test::OneThread one;
    for (const std::string& spec : all_schemes()) {
        SCOPED_TRACE(spec);
        auto c = decoded_to(spec, 3, 151);
        const KvMemory one = c->memory();
        const std::uint64_t shared = cache_for(spec)->memory().bytes;  // tables held once (turbo, qjl)
        fork_sequence(*c, 3, 8);
        EXPECT_EQ(c->memory().bytes - shared, 2 * (one.bytes - shared)) << "a copy: its bytes count too";
        EXPECT_EQ(attend_at(*c, 8, 150), attend_at(*c, 3, 150));
        // The fork continues with other tokens (data from position 200 on), the source with its own.
        auto ref = decoded_to(spec, 0, 151);  // then tokens [200, 240): what the fork gets
        const std::size_t row = 2 * 32;
        for (int il = 0; il < 3; ++il) {
            c->append(il, 8, 40, data().a.k.data() + 200 * row, data().a.v.data() + 200 * row);
            ref->append(il, 0, 40, data().a.k.data() + 200 * row, data().a.v.data() + 200 * row);
        }
        append(*c, 3, 151, 40);
        std::vector<float> fork_out(3 * 2 * 2 * 32), ref_out(fork_out.size());
        for (int il = 0; il < 3; ++il)
            for (int ih = 0; ih < 2; ++ih) {
                const std::int64_t p = 190;
                const float* q = data().a.q.data() + (p * 4 + ih * 2) * 32;
                c->attend(il, 8, ih, {q, 128, 1, 2, &p, 0.17f, fork_out.data() + (il * 2 + ih) * 64, 64});
                ref->attend(il, 0, ih, {q, 128, 1, 2, &p, 0.17f, ref_out.data() + (il * 2 + ih) * 64, 64});
            }
        EXPECT_EQ(fork_out, ref_out);
        EXPECT_NE(attend_at(*c, 3, 190), fork_out);  // the source went its own way
        EXPECT_THROW(fork_sequence(*c, 3, 8), Error);  // in use
        EXPECT_THROW(fork_sequence(*c, 5, 9), Error);  // no such source
    }
}

TEST(KvStateCaches, RestoreRefusesAnIdInUseABudgetAndLeavesTheCacheAsItWas) {
    const test::OneThread one;
    for (const std::string& spec : all_schemes()) {
        SCOPED_TRACE(spec);
        std::unique_ptr<KvCache> a;
        const std::vector<std::uint8_t> bytes = filled_section(spec, 200, &a);
        auto b = cache_for(spec);
        b->add_sequence(0);
        ByteReader r(bytes, "test");
        EXPECT_THROW(b->restore_sequence(0, r), Error);
        if (spec == "f32" || spec == "f16") continue;  // the dense references have no budget
        const std::uint64_t need = a->memory().bytes;
        auto small = cache_for(spec, need - 1);
        ByteReader r2(bytes, "test");
        try {
            small->restore_sequence(0, r2);
            ADD_FAILURE() << "restored over the budget";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
        }
        EXPECT_FALSE(small->has_sequence(0));
        EXPECT_EQ(small->memory().bytes, cache_for(spec)->memory().bytes);  // no sequence: shared tables only
        auto enough = cache_for(spec, need);
        ByteReader r3(bytes, "test");
        enough->restore_sequence(0, r3);
        EXPECT_EQ(enough->memory().bytes, need);
    }
}

// Truncated sections: a clear error at every length tried, the cache unchanged (pages given back).
TEST(KvStateCaches, TruncatedSectionsAreErrorsAndChangeNothing) {
    const test::OneThread one;
    for (const std::string& spec : all_schemes()) {
        SCOPED_TRACE(spec);
        const std::vector<std::uint8_t> bytes = filled_section(spec, 180);
        auto b = cache_for(spec);
        b->add_sequence(1);
        append(*b, 1, 0, 50);
        const KvMemory before = b->memory();
        for (std::size_t len : {std::size_t(0), std::size_t(7), bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
            ByteReader r(std::span<const std::uint8_t>(bytes).first(len), "test");
            EXPECT_THROW(b->restore_sequence(0, r), Error) << len;
            EXPECT_FALSE(b->has_sequence(0));
        }
        const KvMemory after = b->memory();
        std::uint64_t free_pages = 0;  // a failed PQ restore gives its pages back to the pool
        for (const auto& [part, n] : after.parts)
            if (part == "free pool pages") free_pages = n;
        EXPECT_EQ(after.bytes - free_pages, before.bytes);
    }
}

TEST(KvStateCaches, ASchemeWithoutStateSupportSaysSo) {
    struct Bare final : KvCache {
        Bare() : KvCache(KvShape{1, 1, 8, RopePairs::none, {}}) {}
        std::string scheme() const override { return "turbo"; }
        void add_sequence(int) override {}
        void remove_sequence(int) override {}
        bool has_sequence(int) const override { return true; }
        std::int64_t n_tokens(int, int) const override { return 0; }
        void append(int, int, std::int64_t, const float*, const float*) override {}
        void attend(int, int, int, const KvQuery&) const override {}
        KvMemory memory() const override { return {}; }
    } bare;
    ByteWriter w;
    try {
        bare.save_sequence(0, w);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("scheme turbo cannot save its state"), std::string::npos) << e.what();
    }
    ByteReader r(w.data(), "test");
    EXPECT_THROW(bare.restore_sequence(1, r), Error);
}

// The restore's check that code blocks are what encoding leaves (padding tokens and subspaces zero).
TEST(KvStateCaches, CodeBlocksWithNonZeroPaddingAreNotCanonical) {
    for (const auto& [M, nbits] : {std::pair{6, 4}, std::pair{8, 4}, std::pair{5, 8}}) {
        SCOPED_TRACE(M);
        const std::int64_t n = 45;  // a partial second block
        const std::vector<std::uint8_t> codes = test::random_codes(std::size_t(n) * M, 1 << nbits, 3);
        std::vector<std::uint8_t> blocks(std::size_t(code_blocks_for(n)) * code_block_bytes(M, nbits));
        pack_code_blocks(codes.data(), n, M, nbits, blocks.data());
        EXPECT_TRUE(kv::code_blocks_canonical(blocks.data(), n, M, nbits));
        std::vector<std::uint8_t> padded_token = blocks;  // token 46 (in the second block), subspace 0
        store_token_code(padded_token.data(), 46, M, nbits, std::vector<std::uint8_t>(M, 1).data());
        EXPECT_FALSE(kv::code_blocks_canonical(padded_token.data(), n, M, nbits));
        if (code_padded_M(M, nbits) != M) {  // a padding subspace of token 3, in the first (full) block
            std::vector<std::uint8_t> padded_sub = blocks;
            int shift = 0;  // set by the call, which must run before the shift is read
            const std::size_t byte = code_byte_in_block(3, M, nbits, &shift);
            padded_sub[byte] |= std::uint8_t(1 << shift);
            EXPECT_FALSE(kv::code_blocks_canonical(padded_sub.data(), n, M, nbits));
        }
    }
}
