// Sampling: greedy, determinism per seed, the nucleus.

#include <gtest/gtest.h>

#include <set>

#include "aqpim/error.h"
#include "aqpim/sampler.h"

using namespace aqpim;

TEST(Sampler, GreedyPicksTheFirstLargest) {
    const std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
    Sampler s(SamplerParams{0.0f, 1.0f, 1});
    EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, SameSeedSameTokensAndNucleusCutsTheTail) {
    std::vector<float> l(50);
    for (int i = 0; i < 50; ++i) l[i] = float(i % 7) * 0.5f;
    Sampler a(SamplerParams{1.0f, 0.95f, 9}), b(SamplerParams{1.0f, 0.95f, 9});
    std::set<int> seen;
    for (int i = 0; i < 200; ++i) {
        const int x = a.sample(l.data(), 50);
        EXPECT_EQ(x, b.sample(l.data(), 50));
        seen.insert(x);
    }
    EXPECT_GT(seen.size(), 5u);  // it does sample
    // top-p tiny: only the most probable tokens (value 3.0: ids 6, 13, ...) survive
    Sampler c(SamplerParams{1.0f, 0.01f, 3});
    for (int i = 0; i < 50; ++i) EXPECT_EQ(c.sample(l.data(), 50) % 7, 6);
}

TEST(Sampler, BadParametersAreErrors) {
    EXPECT_THROW(Sampler(SamplerParams{-1.0f, 0.9f, 1}), Error);
    EXPECT_THROW(Sampler(SamplerParams{1.0f, 0.0f, 1}), Error);
    EXPECT_THROW(Sampler(SamplerParams{1.0f, 1.5f, 1}), Error);
}
