#pragma once
// The rule mask_guided must keep, checked the slow way: a token is kept when its whole text continues
// the state (tried on a copy), EOS when the text can end there or nothing else is kept. Shared by
// the tests of JSON mode's, the schemas' and the regexes' recognizers.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "serve/json_constraint.h"

namespace aqpim::test {

/// `texts` grown to `size` token texts of 1 to `max_len` bytes drawn from `bytes`.
inline std::vector<std::string> with_random_texts(std::vector<std::string> texts, std::mt19937& rng, const std::string& bytes,
                                                  std::size_t size, int max_len) {
    while (texts.size() < size) {
        std::string t;
        for (int i = 0, n = 1 + int(rng() % unsigned(max_len)); i < n; ++i) t += bytes[rng() % bytes.size()];
        texts.push_back(t);
    }
    return texts;
}

/// mask_guided at `state` against trying every token whole; `after` names the state in failures.
/// Returns the number of tokens other than EOS that continue it.
template <class Prefix>
int expect_mask_keeps_every_continuation(const Prefix& state, const serve::GuideVocabulary& vocab,
                                         const std::vector<std::string>& texts, std::int32_t eos, const std::string& after) {
    const int n_vocab = int(texts.size());
    std::vector<float> logits(texts.size(), 1.0f);
    serve::mask_guided(state, vocab, logits.data(), n_vocab, -1e30f);
    int kept = 0;
    for (int t = 0; t < n_vocab; ++t) {
        if (t == eos) continue;
        Prefix next = state;
        const bool ok = !texts[std::size_t(t)].empty() && !state.complete() && next.feed(texts[std::size_t(t)]);
        kept += ok;
        EXPECT_EQ(logits[std::size_t(t)] == 1.0f, ok) << "token " << t << " '" << texts[std::size_t(t)] << "' after '" << after << "'";
    }
    EXPECT_EQ(logits[std::size_t(eos)] == 1.0f, state.can_end() || kept == 0) << "EOS after '" << after << "'";
    return kept;
}

}  // namespace aqpim::test
