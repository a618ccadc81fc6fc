// Sampling: greedy, determinism per seed, the nucleus.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

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

// The nucleus is found by partial sorts that grow; the tokens drawn must be those of a full sort.
TEST(Sampler, PartialSortsDrawWhatAFullSortDraws) {
    std::mt19937 gen(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> l(20000);
    for (float& x : l) x = normal(gen);
    l[7] = l[9];  // a tie, broken by the lower id
    for (float top_p : {0.01f, 0.5f, 0.95f, 0.999f, 1.0f}) {
        const SamplerParams params{1.3f, top_p, 11};
        Sampler s(params);
        std::mt19937_64 rng(params.seed);  // the reference: Sampler's own steps with a full sort
        for (int draw = 0; draw < 20; ++draw) {
            const float mx = *std::max_element(l.begin(), l.end());
            std::vector<std::pair<float, int>> c(l.size());
            double total = 0;
            for (std::size_t i = 0; i < l.size(); ++i) {
                c[i] = {std::exp((l[i] - mx) / params.temperature), int(i)};
                total += c[i].first;
            }
            std::sort(c.begin(), c.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
            double kept = 0;
            std::size_t n = 0;
            while (n < c.size() && (n == 0 || kept < top_p * total)) kept += c[n++].first;
            const double u = std::uniform_real_distribution<double>(0.0, kept)(rng);
            double acc = 0;
            int expect = c[n - 1].second;
            for (std::size_t i = 0; i < n; ++i)
                if (u < (acc += c[i].first)) {
                    expect = c[i].second;
                    break;
                }
            ASSERT_EQ(s.sample(l.data(), int(l.size())), expect) << "top_p=" << top_p << " draw " << draw;
        }
    }
}

TEST(Sampler, BadParametersAreErrors) {
    EXPECT_THROW(Sampler(SamplerParams{-1.0f, 0.9f, 1}), Error);
    EXPECT_THROW(Sampler(SamplerParams{1.0f, 0.0f, 1}), Error);
    EXPECT_THROW(Sampler(SamplerParams{1.0f, 1.5f, 1}), Error);
}
