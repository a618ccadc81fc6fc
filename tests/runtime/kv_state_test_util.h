#pragma once
// What the KV-state tests share: a tokenizer for the generated tiny model, and the check that a
// generation saved at a point and restored continues exactly as one uninterrupted run.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "aqpim/generate.h"
#include "aqpim/kv_state.h"
#include "aqpim/tokenizer.h"
#include "aqpim/transformer.h"
#include "support/one_thread.h"

namespace aqpim::test {

/// A vocabulary of n plain tokens "t0".."t{n-1}" (BOS 1, EOS 2), so generate() runs a tiny model.
inline std::shared_ptr<const Tokenizer> plain_vocabulary(int n) {
    VocabData v;
    for (int i = 0; i < n; ++i) {
        v.tokens.push_back("t" + std::to_string(i));
        v.scores.push_back(0.0f);
        v.types.push_back(i < 3 ? TokenType::control : TokenType::normal);
    }
    v.bos = 1;
    v.eos = 2;
    return Tokenizer::create(std::move(v));
}

struct ContinueCase {
    std::string kv;
    std::vector<std::int32_t> prompt;
    int n_total = 0;               ///< tokens the uninterrupted run samples
    std::vector<int> save_after;   ///< sampled tokens at which a run is saved, restored, continued
    SamplerParams sampler{};
};

/// One run samples c.n_total tokens; for each point k another samples k, saves (aqpim/kv_state.h),
/// restores into a new cache and samples the rest: the tokens, the sampler's state and the saved
/// bytes at the end equal the uninterrupted run's. EOS does not stop the runs.
inline void expect_restore_continues_exactly(Transformer& model, const Tokenizer& tok, const ModelIdentity& id,
                                             const ContinueCase& c) {
    const KvShape shape = model.kv_shape();
    const std::int64_t context = std::int64_t(c.prompt.size()) + c.n_total;
    const KvCacheOptions ko{0, context};
    GenerateOptions opt;
    opt.stop_at_eos = false;
    const auto run = [&](KvCache& cache, SlotState& slot, Sampler& sampler, int n) {
        opt.n_predict = n;
        generate(model, tok, cache, 0, slot, sampler, opt);
        slot.sampler = sampler.state();
    };
    auto whole = make_kv_cache(parse_kv_scheme(c.kv), shape, ko);
    whole->add_sequence(0);
    SlotState ref{c.prompt, 0, {}};
    Sampler ref_sampler(c.sampler);
    run(*whole, ref, ref_sampler, c.n_total);
    const std::vector<std::uint8_t> ref_bytes = save_kv_state(*whole, 0, ref, id, context);
    for (int k : c.save_after) {
        SCOPED_TRACE("saved after " + std::to_string(k) + " tokens");
        auto part = make_kv_cache(parse_kv_scheme(c.kv), shape, ko);
        part->add_sequence(0);
        SlotState slot{c.prompt, 0, {}};
        Sampler sampler(c.sampler);
        run(*part, slot, sampler, k);
        const std::vector<std::uint8_t> saved = save_kv_state(*part, 0, slot, id, context);
        part.reset();  // nothing of the first run survives but its bytes
        RestoredKvState back = load_kv_state(saved, {&id, &shape, 0});
        SlotState cont = back.info.slot;
        ASSERT_TRUE(cont.sampler);
        Sampler resumed(*cont.sampler);
        run(*back.cache, cont, resumed, c.n_total - k);
        EXPECT_EQ(cont.tokens, ref.tokens);
        EXPECT_TRUE(resumed.state() == ref_sampler.state());
        EXPECT_EQ(save_kv_state(*back.cache, 0, cont, id, context), ref_bytes);
    }
}

}  // namespace aqpim::test
