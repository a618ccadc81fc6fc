// Restore then continue gives exactly the tokens of an uninterrupted run, through generate(), for
// every scheme, greedy and sampled, saved before the codebooks exist, as they train, after a
// refresh version, inside the window: on a generated tiny model, stories260K and austen-13m.

#include <gtest/gtest.h>

#include "aqpim/model.h"
#include "runtime/kv_state_test_util.h"
#include "support/shared_data.h"
#include "support/tiny_model.h"

using namespace aqpim;

namespace {

const SamplerParams kGreedy{0.0f, 1.0f, 1}, kSampled{0.9f, 0.95f, 1234};

std::vector<std::int32_t> ids(std::initializer_list<std::int32_t> l) { return l; }

/// A shared model on one thread, its identity, and a prompt's tokens.
struct SharedModel {
    test::OneThread one;
    LoadedModel m;
    Transformer t;
    ModelIdentity id;
    std::vector<std::int32_t> prompt;
    SharedModel(const std::string& rel, const std::string& text)
        : m(load_model(test::shared_path(rel))), t(m.weights), id(model_identity(m.weights)),
          prompt(m.tokenizer->encode(text, true)) {}
};

}  // namespace

TEST(KvStateGenerate, TinyModelEveryScheme) {
    const test::OneThread one;
    test::TinyModelShape s;
    s.n_embd = 64;  // head_dim 16
    s.n_layer = 3;
    const ModelWeights w = test::tiny_model(s, 21);
    Transformer t(w);
    const auto tok = test::plain_vocabulary(s.n_vocab);
    const ModelIdentity id = model_identity(w);
    // pq: sinks 4, calib 24 (version 0 trains at 24 tokens), window 8, refresh 32 (version 1 trains at 56
    // tokens, version 2 at 88, the bound). The prompt is 8 tokens; saved after k samples the cache holds
    // 7 + k tokens.
    const std::vector<int> pq_points = {4, 17, 23, 36, 49, 60, 81};
    const std::vector<int> points = {4, 23, 50};  // the scalar schemes: before and after KIVI's window fills
    for (const char* kv : {"f32", "f16", "int8:g=16", "int4:g=8", "kivi2:g=8,window=12",
                           "pq:m=8,calib=24,window=8,refresh=32,versions=3,page=32",
                           "pq:m=4,calib=24,window=8,refresh=32,versions=3,page=32,cb=f16,wq=int8,f16_layers=1",
                           "pq:bits=3,calib=24,window=8,refresh=0,page=32,rotation=hadamard,ctx=4096"})
        for (const SamplerParams& sp : {kGreedy, kSampled}) {
            SCOPED_TRACE(std::string(kv) + (sp.temperature > 0 ? " sampled" : " greedy"));
            const bool pq = std::string(kv).rfind("pq", 0) == 0;
            test::expect_restore_continues_exactly(
                t, *tok, id, {kv, ids({1, 5, 9, 13, 17, 21, 25, 29}), 100, pq ? pq_points : points, sp});
        }
}

TEST(KvStateGenerate, Stories260K) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    SharedModel s("models/stories260K/stories260K.bin", "Once upon a time, a little dog");
    const int n = int(s.prompt.size());
    // head_dim 8: q8_0/q4_0 need 32; pq m=4 (dsub 2). calib 32: version 0 trains at 32 tokens, version 1
    // at 64 + 28 = 92, window 8.
    const std::vector<int> points = {32 - n + 1, 40, 92 - n + 1, 100};
    for (const char* kv : {"f16", "int4:g=8", "kivi2:g=8,window=16", "pq:calib=32,window=8,refresh=64,page=32"})
        for (const SamplerParams& sp : {kGreedy, kSampled}) {
            SCOPED_TRACE(std::string(kv) + (sp.temperature > 0 ? " sampled" : " greedy"));
            test::expect_restore_continues_exactly(s.t, *s.m.tokenizer, s.id, {kv, s.prompt, 120, points, sp});
        }
}

TEST(KvStateGenerate, Austen13m) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/austen-13m-f16.gguf");
    SharedModel s("models/austen-13m/austen-13m-f16.gguf", "It is a truth universally acknowledged");
    const int n = int(s.prompt.size());
    // head_dim 128, GQA 2:1. pq: calib 32 (version 0 trains at 32 tokens), window 8, refresh 32
    // (version 1 trains at 64 tokens); saved right after each. The others: saved once the window (and
    // for bits=2 the calibration) has passed.
    test::expect_restore_continues_exactly(
        s.t, *s.m.tokenizer, s.id, {"pq:calib=32,window=8,refresh=32,versions=2,page=32", s.prompt, 68, {32 - n + 1, 64 - n + 1}, kSampled});
    for (const char* kv : {"f16", "q8_0", "q4_0", "kivi2:g=8,window=8", "pq:refresh=0,bits=2,cb=f16,wq=q8_0,window=16,calib=16,ctx=1024"}) {
        SCOPED_TRACE(kv);
        test::expect_restore_continues_exactly(s.t, *s.m.tokenizer, s.id, {kv, s.prompt, 26, {20}, kGreedy});
    }
}

// A prefix saved once (a shared system prompt longer than calib: its codebooks come from it), then
// restored for two requests that continue with their own tokens: each gives exactly what a fresh run
// that prefills the same prefix and then its own tokens gives.
TEST(KvStateGenerate, APrefixRestoredForRequestsThatDiffer) {
    const test::OneThread one;
    test::TinyModelShape s;
    s.n_embd = 64;
    const ModelWeights w = test::tiny_model(s, 8);
    Transformer t(w);
    const auto tok = test::plain_vocabulary(s.n_vocab);
    const ModelIdentity id = model_identity(w);
    const std::string kv = "pq:m=8,calib=24,window=8,refresh=0,page=32";
    std::vector<std::int32_t> prefix;
    for (int i = 0; i < 40; ++i) prefix.push_back(3 + (i * 7) % 60);
    GenerateOptions opt;
    opt.stop_at_eos = false;
    const KvCacheOptions ko{0, 256};
    // The prefix, prefilled and saved with nothing waiting (n_predict 0).
    auto base = make_kv_cache(parse_kv_scheme(kv), t.kv_shape(), ko);
    base->add_sequence(0);
    SlotState p{prefix, 0, {}};
    Sampler unused(SamplerParams{});
    opt.n_predict = 0;
    generate(t, *tok, *base, 0, p, unused, opt);
    ASSERT_EQ(p.n_cached, 40);
    const std::vector<std::uint8_t> saved = save_kv_state(*base, 0, p, id, ko.context);
    auto server = make_kv_cache(parse_kv_scheme(kv), t.kv_shape(), ko);  // one cache, many requests
    for (const std::vector<std::int32_t>& own : {std::vector<std::int32_t>{9, 8, 7}, std::vector<std::int32_t>{50, 51}}) {
        const int seq = own[0];
        SlotState r = restore_kv_state(saved, *server, seq, id);
        r.tokens.insert(r.tokens.end(), own.begin(), own.end());
        Sampler sr(SamplerParams{0.9f, 0.95f, 3});
        opt.n_predict = 30;
        generate(t, *tok, *server, seq, r, sr, opt);
        // Fresh: the prefix in one call, then the request's tokens in one call, as the restore did.
        auto fresh = make_kv_cache(parse_kv_scheme(kv), t.kv_shape(), ko);
        fresh->add_sequence(0);
        SlotState f{prefix, 0, {}};
        opt.n_predict = 0;
        generate(t, *tok, *fresh, 0, f, unused, opt);
        f.tokens.insert(f.tokens.end(), own.begin(), own.end());
        Sampler sf(SamplerParams{0.9f, 0.95f, 3});
        opt.n_predict = 30;
        generate(t, *tok, *fresh, 0, f, sf, opt);
        EXPECT_EQ(r.tokens, f.tokens);
        EXPECT_EQ(save_kv_state(*server, seq, r, id, ko.context), save_kv_state(*fresh, 0, f, id, ko.context));
    }
    EXPECT_TRUE(server->has_sequence(9) && server->has_sequence(50));
}
