// The KV-state container (docs/kv-state.md): the documented layout, what a restore checks (model,
// shape, scheme, sequence id), hostile bytes (truncated at many lengths, every byte flipped, fields
// rewritten with a valid checksum, random mutations) always an aqpim::Error or a valid restore,
// sections a reader skips, files, and the model fingerprint.

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/hash.h"
#include "aqpim/kv_scheme.h"
#include "runtime/kv_state_test_util.h"
#include "support/errors.h"
#include "support/temp_dir.h"
#include "support/tiny_model.h"

using namespace aqpim;

namespace {

using Bytes = std::vector<std::uint8_t>;

struct Tiny {
    ModelWeights w = [] {
        test::TinyModelShape s;
        s.n_embd = 128;  // head_dim 32 (q8_0, q4_0)
        return test::tiny_model(s, 3);
    }();
    Transformer t{w, 1};
    std::shared_ptr<const Tokenizer> tok = test::plain_vocabulary(64);
    ModelIdentity id = model_identity(w);
};
Tiny& tiny() {
    static Tiny m;
    return m;
}

constexpr const char* kPq = "pq:m=8,calib=24,window=8,refresh=32,versions=2,page=32";

/// A sequence of 8 prompt tokens and n sampled ones, saved.
Bytes saved_state(const std::string& kv, int n, std::int64_t context = 64) {
    Tiny& m = tiny();
    auto cache = make_kv_cache(parse_kv_scheme(kv), m.t.kv_shape(), {0, context});
    cache->add_sequence(0);
    SlotState slot{{1, 4, 8, 15, 16, 23, 42, 7}, 0, {}};
    Sampler sampler(SamplerParams{0.8f, 0.9f, 5});
    GenerateOptions o;
    o.n_predict = n;
    o.stop_at_eos = false;
    generate(m.t, *m.tok, *cache, 0, slot, sampler, o);
    slot.sampler = sampler.state();
    return save_kv_state(*cache, 0, slot, m.id, context);
}

std::uint64_t le(const Bytes& b, std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t(b[at + i]) << (8 * i);
    return v;
}
void put_le(Bytes& b, std::size_t at, int n, std::uint64_t v) {
    for (int i = 0; i < n; ++i) b[at + i] = std::uint8_t(v >> (8 * i));
}
/// Recompute the checksum after an edit (what a hostile writer would do).
void reseal(Bytes& b) { put_le(b, b.size() - 8, 8, xxh64(b.data(), b.size() - 8)); }

struct Section {
    std::string tag;
    std::size_t at = 0, len = 0;  ///< payload offset and length
};
/// The sections as docs/kv-state.md lays them out.
std::vector<Section> sections(const Bytes& b) {
    std::vector<Section> out;
    std::size_t at = 32;
    for (std::uint64_t i = 0; i < le(b, 24, 4); ++i) {
        Section s{std::string(reinterpret_cast<const char*>(b.data() + at), 4), at + 16, std::size_t(le(b, at + 8, 8))};
        out.push_back(s);
        at = s.at + s.len;
    }
    EXPECT_EQ(at, b.size() - 8);
    return out;
}
Section find(const Bytes& b, const std::string& tag) {
    for (const Section& s : sections(b))
        if (s.tag == tag) return s;
    ADD_FAILURE() << "no section " << tag;
    return {};
}

/// b with one more section before the checksum.
Bytes with_section(Bytes b, const char* tag, std::uint32_t flags, const Bytes& payload) {
    b.resize(b.size() - 8);
    ByteWriter w;
    w.bytes(tag, 4);
    w.u32(flags);
    w.u64(payload.size());
    w.bytes(payload.data(), payload.size());
    b.insert(b.end(), w.data().begin(), w.data().end());
    b.resize(b.size() + 8);
    put_le(b, 24, 4, le(b, 24, 4) + 1);
    put_le(b, 16, 8, b.size());
    reseal(b);
    return b;
}

std::string load_error(const Bytes& b) {
    return test::error_of([&] { load_kv_state(b, {&tiny().id, nullptr, 0}); });
}

}  // namespace

TEST(KvState, TheLayoutIsTheDocumentedOne) {
    const Bytes b = saved_state(kPq, 40);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 8), "AQKVSTAT");
    EXPECT_EQ(le(b, 8, 4), 1u);           // version
    EXPECT_EQ(le(b, 12, 4), 32u);         // header bytes
    EXPECT_EQ(le(b, 16, 8), b.size());    // file bytes
    EXPECT_EQ(le(b, 28, 4), 0u);          // flags
    EXPECT_EQ(le(b, b.size() - 8, 8), xxh64(b.data(), b.size() - 8));
    std::vector<std::string> tags;
    for (const Section& s : sections(b)) tags.push_back(s.tag);
    EXPECT_EQ(tags, (std::vector<std::string>{"MODL", "KVSH", "TOKS", "SMPL", "KVSQ"}));
    const Section m = find(b, "MODL");
    EXPECT_EQ(le(b, m.at, 8), tiny().id.fingerprint);
    const Section t = find(b, "TOKS");
    EXPECT_EQ(le(b, t.at, 8), 8u + 39u);  // n_cached: the last sampled token waits unfed
    EXPECT_EQ(le(b, t.at + 8, 8), 8u + 40u);
    EXPECT_EQ(le(b, t.at + 16, 4), 1u);   // the first token id
    EXPECT_EQ(find(b, "SMPL").len, SamplerState::kBytes);
    const KvStateInfo info = read_kv_state_info(b);
    EXPECT_EQ(info.scheme, "pq:m=8,calib=24,refresh=32,versions=2,window=8,page=32");  // canonical order
    EXPECT_EQ(info.context, 64);
    EXPECT_EQ(info.shape.n_layer, 2);
    EXPECT_EQ(info.shape.head_dim, 32);
    EXPECT_EQ(info.cache_offset, find(b, "KVSQ").at);
    // The cache section starts with the layers' token counts.
    EXPECT_EQ(le(b, info.cache_offset, 8), 47u);
    EXPECT_EQ(le(b, info.cache_offset + 8, 8), 47u);
}

TEST(KvState, RestoreChecksModelShapeSchemeAndId) {
    Tiny& m = tiny();
    const Bytes b = saved_state(kPq, 30);
    const auto err = test::error_of;
    ModelIdentity other = m.id;
    other.fingerprint ^= 1;
    other.name = "other";
    auto c = make_kv_cache(parse_kv_scheme(kPq), m.t.kv_shape(), {0, 64});
    EXPECT_NE(err([&] { restore_kv_state(b, *c, 0, other); }).find("saved for model 'tiny'"), std::string::npos);
    auto f16 = make_kv_cache(parse_kv_scheme("f16"), m.t.kv_shape());
    EXPECT_NE(err([&] { restore_kv_state(b, *f16, 0, m.id); }).find("this cache is 'f16'"), std::string::npos);
    auto wide = make_kv_cache(parse_kv_scheme(kPq), KvShape{2, 4, 32, RopePairs::interleaved, {}});
    EXPECT_NE(err([&] { restore_kv_state(b, *wide, 0, m.id); }).find("KV heads"), std::string::npos);
    auto other_ctx = make_kv_cache(parse_kv_scheme(kPq), m.t.kv_shape(), {0, 65});  // the last version's augmentation
    EXPECT_NE(err([&] { restore_kv_state(b, *other_ctx, 0, m.id); }).find("context"), std::string::npos);
    EXPECT_FALSE(other_ctx->has_sequence(0));
    c->add_sequence(0);
    EXPECT_NE(err([&] { restore_kv_state(b, *c, 0, m.id); }).find("in use"), std::string::npos);
    const SlotState s = restore_kv_state(b, *c, 5, m.id);
    EXPECT_EQ(s.tokens.size(), 38u);
    EXPECT_EQ(s.n_cached, 37);
    EXPECT_EQ(c->n_tokens(5, 1), 37);
}

TEST(KvState, SaveRefusesASlotThatDoesNotMatchTheCache) {
    Tiny& m = tiny();
    auto c = make_kv_cache(parse_kv_scheme("f16"), m.t.kv_shape());
    c->add_sequence(0);
    std::vector<float> kv(2 * 32, 0.5f);
    c->append(0, 0, 1, kv.data(), kv.data());  // layer 1 still empty: mid-step
    EXPECT_THROW(save_kv_state(*c, 0, SlotState{{1}, 1, {}}, m.id), Error);
    c->append(1, 0, 1, kv.data(), kv.data());
    EXPECT_THROW(save_kv_state(*c, 0, SlotState{{1}, 2, {}}, m.id), Error);      // says 2 cached
    EXPECT_THROW(save_kv_state(*c, 0, SlotState{{1, -3}, 1, {}}, m.id), Error);  // a negative id
    EXPECT_THROW(save_kv_state(*c, 7, SlotState{{1}, 1, {}}, m.id), Error);      // no sequence 7
    const Bytes ok = save_kv_state(*c, 0, SlotState{{}, 1, {}}, m.id);  // no tokens kept: a cache alone
    const RestoredKvState r = load_kv_state(ok);
    EXPECT_EQ(r.cache->n_tokens(0, 0), 1);
    EXPECT_FALSE(r.info.slot.sampler);
}

TEST(KvState, TruncatedOrFlippedStatesAreErrors) {
    const Bytes b = saved_state(kPq, 40);
    ASSERT_EQ(load_error(b), "");
    std::mt19937 rng(1);
    for (int i = 0; i < 300; ++i) {
        const std::size_t len = i < 100 ? std::size_t(i) : rng() % b.size();
        const std::string e = load_error(Bytes(b.begin(), b.begin() + len));
        ASSERT_NE(e, "") << len;
        ASSERT_NE(e.find("kv state"), std::string::npos) << e;
    }
    EXPECT_NE(load_error(Bytes(b.begin(), b.end() - 1)).find("truncated"), std::string::npos);
    Bytes longer = b;
    longer.push_back(0);
    EXPECT_NE(load_error(longer).find("after the"), std::string::npos);
    // Every single flipped byte is caught (the checksum), before anything is restored.
    for (std::size_t at = 0; at < b.size(); ++at) {
        Bytes f = b;
        f[at] ^= 0x20;
        ASSERT_NE(load_error(f), "") << at;
    }
    Bytes f = b;
    f[b.size() / 2] ^= 1;
    EXPECT_NE(load_error(f).find("checksum"), std::string::npos);
}

// Fields rewritten with the checksum fixed up: each is caught by its own check, named.
TEST(KvState, ForeignAndInconsistentFieldsAreNamed) {
    const Bytes b = saved_state(kPq, 40);
    const KvStateInfo info = read_kv_state_info(b);
    const auto edited = [&](std::size_t at, int n, std::uint64_t v) {
        Bytes e = b;
        put_le(e, at, n, v);
        reseal(e);
        return load_error(e);
    };
    const auto has = [](const std::string& e, const char* word) {
        EXPECT_NE(e.find(word), std::string::npos) << "wanted '" << word << "' in: " << e;
    };
    Bytes magic = b;
    magic[0] = 'X';
    has(load_error(magic), "not a KV state");
    has(edited(8, 4, 2), "format version 2");
    has(edited(28, 4, 1), "'flags'");
    has(edited(24, 4, 9), "truncated");  // more sections than bytes
    const Section shape = find(b, "KVSH"), tokens = find(b, "TOKS");
    has(edited(shape.at, 4, 0), "'n_layer' = 0");
    has(edited(shape.at + 8, 4, 5000), "'head_dim' = 5000");
    has(edited(shape.at + 12, 4, 7), "'rope_pairs' = 7");
    has(edited(tokens.at, 8, std::uint64_t(1) << 40), "'n_cached'");
    has(edited(tokens.at + 8, 8, std::uint64_t(1) << 60), "truncated");  // a huge token count: no allocation
    has(edited(tokens.at + 16, 4, 0xffffffffu), "has id -1");
    has(edited(tokens.at, 8, 5), "the slot says 5 are cached");
    const std::size_t sampler = find(b, "SMPL").at;
    has(edited(sampler + 4, 4, 0x40000000u), "top-p");                 // top_p = 2
    has(edited(sampler + 16, 8, std::uint64_t(1) << 50), "drew");      // a replay of 2^50 words
    // Inside the cache section.
    const std::size_t cache = info.cache_offset;
    has(edited(cache, 8, std::uint64_t(1) << 30), "more than the");     // a layer's count beyond any context
    has(edited(cache, 8, 1000000), "codebook versions");              // the schedule has trained 2 there
    has(edited(cache + 16, 8, 7), "code bytes per token");            // the page width
    // Counts the bytes cannot hold: refused before any page or row is allocated for them.
    for (const char* kv : {kPq, "pq:m=8,calib=24,window=8,refresh=32,versions=2,page=32,f16_layers=0", "f32", "kivi2:g=8"}) {
        Bytes big = saved_state(kv, 60);  // past the version bound: the count stays consistent with it
        put_le(big, read_kv_state_info(big).cache_offset, 8, std::uint64_t(1) << 24);
        reseal(big);
        has(load_error(big), "truncated");
    }
    // The scheme text of another cache: restoring into what it names fails on that cache's layout.
    Bytes scheme = b;
    const std::size_t text = shape.at + 16 + 4;
    ASSERT_EQ(std::string(scheme.begin() + text, scheme.begin() + text + 4), "pq:m");
    scheme[text + 5] = '4';  // m=4
    reseal(scheme);
    EXPECT_NE(load_error(scheme), "");
    // Sections: a duplicate, an unknown required one refused; an unknown optional one skipped.
    has(load_error(with_section(b, "MODL", 1, Bytes(16, 0))), "appears twice");
    has(load_error(with_section(b, "ZZZZ", 1, Bytes(3, 0))), "required but unknown");
    EXPECT_EQ(load_error(with_section(b, "ZZZZ", 0, Bytes(5, 7))), "");
}

// Random bytes changed with the checksum fixed: every outcome is a restore or an aqpim::Error.
TEST(KvState, RandomMutationsNeverCrash) {
    for (const char* kv : {kPq, "pq:m=4,calib=24,window=8,refresh=0,page=32,cb=f16,wq=q8_0,rotation=random", "kivi2:g=8,window=8", "q8_0", "f32"}) {
        SCOPED_TRACE(kv);
        const Bytes b = saved_state(kv, 30);
        std::mt19937 rng(9);
        int errors = 0;
        for (int i = 0; i < 300; ++i) {
            Bytes m = b;
            for (int k = 1 + int(rng() % 4); k > 0; --k) {
                const std::size_t at = 32 + rng() % (m.size() - 40);
                m[at] = rng() % 3 == 0 ? std::uint8_t(0xff) : std::uint8_t(rng());
            }
            reseal(m);
            errors += load_error(m) != "";
        }
        EXPECT_GT(errors, 0);
    }
}

TEST(KvState, FilesRoundTripThroughOutputFile) {
    Tiny& m = tiny();
    const std::string path = test::temp_path("state.aqkv");
    auto c = make_kv_cache(parse_kv_scheme("q4_0"), m.t.kv_shape());
    c->add_sequence(2);
    std::vector<float> kv(5 * 2 * 32, 0.25f);
    for (int il = 0; il < 2; ++il) c->append(il, 2, 5, kv.data(), kv.data());
    save_kv_state_file(path, *c, 2, SlotState{{1, 2, 3, 4, 5}, 5, {}}, m.id);
    EXPECT_EQ(test::files_left_beside(path), 0);
    const RestoredKvState r = load_kv_state(read_kv_state_file(path), {&m.id, nullptr, 0});
    EXPECT_EQ(r.info.slot.tokens, (std::vector<std::int32_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(r.cache->memory().bytes, c->memory().bytes);
    EXPECT_THROW(read_kv_state_file(test::temp_path("missing.aqkv")), Error);
}

TEST(KvState, TheFingerprintFollowsTheWeightsNotTheName) {
    test::TinyModelShape s;
    ModelWeights a = test::tiny_model(s, 3), b = test::tiny_model(s, 3), c = test::tiny_model(s, 4);
    b.config.name = "renamed";
    b.config.n_ctx_train = 4096;
    EXPECT_EQ(model_identity(a).fingerprint, model_identity(b).fingerprint);
    EXPECT_NE(model_identity(a).fingerprint, model_identity(c).fingerprint);
    // One weight byte, one norm value, one config number.
    const auto flip_first_byte = [](ModelWeights& w) {
        auto copy = std::make_shared<std::vector<std::uint8_t>>(w.layers[1].w_down.data,
                                                                 w.layers[1].w_down.data + w.layers[1].w_down.n_bytes());
        (*copy)[0] ^= 1;
        w.storage.push_back(copy);
        w.layers[1].w_down.data = copy->data();
    };
    ModelWeights d = test::tiny_model(s, 3);
    flip_first_byte(d);
    EXPECT_NE(model_identity(d).fingerprint, model_identity(a).fingerprint);
    ModelWeights e = test::tiny_model(s, 3);
    e.layers[0].ffn_norm[3] += 1e-3f;
    EXPECT_NE(model_identity(e).fingerprint, model_identity(a).fingerprint);
    ModelWeights f = test::tiny_model(s, 3);
    f.config.rope_theta = 500000.0f;
    EXPECT_NE(model_identity(f).fingerprint, model_identity(a).fingerprint);
}
