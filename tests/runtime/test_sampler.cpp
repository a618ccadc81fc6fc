// Sampling: greedy, determinism per seed, the nucleus.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <set>
#include <vector>

#include "aqpim/byte_io.h"
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

// The nucleus is found by a partial sort of the first 256, then a radix sort of everything; the
// tokens drawn must be those of a full sort. The second logits have thousands of ties (integer
// logits), which the radix sort must leave in id order after the partial sort moved them.
TEST(Sampler, PartialSortsDrawWhatAFullSortDraws) {
    std::mt19937 gen(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> smooth(20000), tied(20000);
    for (float& x : smooth) x = normal(gen);
    smooth[7] = smooth[9];  // a tie, broken by the lower id
    for (float& x : tied) x = std::round(normal(gen));
    for (const std::vector<float>& l : {smooth, tied})
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

// ---- state ------------------------------------------------------------------------------------------

TEST(SamplerState, ARestoredSamplerDrawsWhatTheOriginalDraws) {
    std::vector<float> l(300);
    std::mt19937 gen(2);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (float& x : l) x = normal(gen);
    Sampler a(SamplerParams{0.9f, 0.9f, 77});
    for (int i = 0; i < 137; ++i) a.sample(l.data(), 300);
    const SamplerState s = a.state();
    EXPECT_EQ(s.draws, 137u);  // one 64-bit word per sampled token
    // Through its bytes, as a saved state carries it.
    ByteWriter w;
    s.write(w);
    ASSERT_EQ(w.size(), SamplerState::kBytes);
    ByteReader r(w.data(), "state");
    const SamplerState back = SamplerState::read(r, 1000);
    EXPECT_TRUE(back == s);
    Sampler b(back);
    for (int i = 0; i < 500; ++i) ASSERT_EQ(b.sample(l.data(), 300), a.sample(l.data(), 300)) << i;
    EXPECT_TRUE(a.state() == b.state());
    // Greedy draws nothing.
    Sampler g(SamplerParams{0.0f, 1.0f, 1});
    g.sample(l.data(), 300);
    EXPECT_EQ(g.state().draws, 0u);
}

TEST(SamplerState, TheDrawsCountIsThePortableState) {
    // (seed, draws) names the std::mt19937_64 state: the same engine advanced by hand agrees.
    Sampler a(SamplerParams{1.0f, 1.0f, 5});
    const std::vector<float> l = {0.0f, 0.0f};
    for (int i = 0; i < 10; ++i) a.sample(l.data(), 2);
    std::mt19937_64 ref(5);
    ref.discard(10);
    const double u_ref = std::uniform_real_distribution<double>(0.0, 1.0)(ref);
    std::mt19937_64 check(5);
    check.discard(a.state().draws);
    EXPECT_EQ(std::uniform_real_distribution<double>(0.0, 1.0)(check), u_ref);
}

TEST(SamplerState, BadBytesAreErrorsNamingTheField) {
    const auto bytes_of = [](float t, float p, std::uint64_t draws) {
        ByteWriter w;
        SamplerState{SamplerParams{t, p, 1}, draws}.write(w);
        return w.take();
    };
    for (const auto& [bytes, word] : {std::pair{bytes_of(0.5f, 1.5f, 0), "top-p"}, std::pair{bytes_of(-1.0f, 0.9f, 0), "temperature"},
                                      std::pair{bytes_of(std::nanf(""), 0.9f, 0), "temperature"},
                                      std::pair{bytes_of(0.5f, 0.9f, 1001), "more than the 1000"}}) {
        ByteReader r(bytes, "state");
        try {
            SamplerState::read(r, 1000);
            ADD_FAILURE() << word;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
        }
    }
    const std::vector<std::uint8_t> short_bytes(23, 0);
    ByteReader r(short_bytes, "state");
    EXPECT_THROW(SamplerState::read(r, 1000), Error);
}
