#pragma once
// What the prompt cache's tests share: a small engine, greedy requests, conversations.

#include <string>
#include <vector>

#include "serve/http_test_util.h"

namespace aqpim::test::prompt_cache {

inline constexpr const char* kPq = "pq:calib=16,refresh=0,window=4,sinks=2";  // coded after 16 tokens

inline serve::EngineOptions options(const std::string& kv, int parallel) {
    serve::EngineOptions o = test::small_engine(kv);
    o.parallel = parallel;
    o.ctx = 256;
    o.prefill_chunk = 16;
    return o;
}

inline serve::GenerationRequest greedy(std::vector<std::int32_t> prompt, int max_tokens) {
    serve::GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampler.temperature = 0.0f;
    return r;
}

inline std::vector<std::int32_t> joined(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

/// n tokens without the BOS test_prompt starts with.
inline std::vector<std::int32_t> words(int n, int salt) {
    std::vector<std::int32_t> p = test::test_prompt(n + 1, salt, test::synth_serve_model().weights.config.n_vocab);
    p.erase(p.begin());
    return p;
}

inline int slot_in(const serve::Engine& e, serve::SlotPhase phase) {
    for (const serve::SlotInfo& s : e.slots())
        if (s.phase == phase) return s.id;
    return -1;
}

}  // namespace aqpim::test::prompt_cache
