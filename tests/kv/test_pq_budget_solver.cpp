// The pq bits= solver: over a grid of budgets and contexts the chosen setting's peak never exceeds
// the budget, explicit keys stay as given, a budget below every setting names the lowest reachable
// value (which then works), the peak arithmetic equals a token-by-token scan, and a real cache holds
// what the solver predicted.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "aqpim/error.h"
#include "aqpim/kv_pq.h"
#include "aqpim/kv_scheme.h"
#include "kv/pq_budget_solver.h"
#include "kv/pq_layout.h"
#include "support/errors.h"
#include "support/random.h"

using namespace aqpim;

namespace {

/// austen-13m's KV shape: 4 layers, 2 KV heads of 128, NeoX pairs, base 10000.
KvShape austen_shape() {
    KvShape s{4, 2, 128};
    s.rope_pairs = RopePairs::neox;
    for (int i = 0; i < 64; ++i) s.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * i / 128)));
    return s;
}

double peak_bits(const std::string& spec, const KvShape& shape, std::int64_t ctx) {
    const PqCapacity cap = pq_capacity(parse_kv_scheme(spec), shape, ctx, 1, KvCacheOptions{0, ctx});
    return double(cap.peak_bytes) * 8.0 / (double(ctx) * double(shape.elements_per_token()));
}

/// The number after "reaches is " in an out-of-reach message.
double lowest_named(const std::string& message) {
    const std::size_t at = message.find("reaches is ");
    return at == std::string::npos ? -1 : std::stod(message.substr(at + 11));
}

}  // namespace

TEST(PqBudgetSolver, ThePeakNeverExceedsTheBudgetOverAGridOfBudgetsAndContexts) {
    const KvShape shape = austen_shape();
    int solved = 0, refused = 0;
    for (std::int64_t ctx : {256, 512, 1024, 4096, 32768})
        for (double bits : {0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 6.0, 8.0}) {
            const std::string spec = fmt::format("pq:bits={}", bits);
            try {
                const double peak = peak_bits(spec, shape, ctx);
                EXPECT_LE(peak, bits) << spec << " at " << ctx;
                // Uses what it may (up to 4 bits; above, the widest codes may not fill the budget).
                if (bits <= 4) EXPECT_GT(peak, bits * 0.8) << spec << " at " << ctx << ": leaves a fifth of the budget unused";
                ++solved;
            } catch (const Error& e) {
                // Out of reach: the message names the lowest peak, above this budget, and that value works.
                const double lowest = lowest_named(e.what());
                ASSERT_GT(lowest, bits) << e.what();
                EXPECT_LE(peak_bits(fmt::format("pq:bits={}", lowest), shape, ctx), lowest) << e.what();
                ++refused;
            }
        }
    EXPECT_GT(solved, 40);
    EXPECT_GT(refused, 2);  // 0.5 bits at 256 tokens cannot hold the sinks and a codebook
}

TEST(PqBudgetSolver, ExplicitKeysOverrideAndTheChoiceIsPrinted) {
    const KvShape shape = austen_shape();
    const PqKvParams p = PqKvParams::from_spec(parse_kv_scheme("pq:bits=2,window=32,wq=q4_0"), shape, 1024);
    EXPECT_EQ(p.window, 32);
    EXPECT_EQ(p.window_type, "q4_0");
    EXPECT_EQ(p.refresh, 0);  // solved: a refresh version's waiting rows cost peak bits at this context
    // The printed spec parses back to the same setting.
    const PqKvParams again = PqKvParams::from_spec(parse_kv_scheme(p.to_string()), shape, 1024);
    EXPECT_EQ(again.to_string(), p.to_string());
    // Without a context nothing is solved (the spec's keys and defaults stand).
    EXPECT_EQ(PqKvParams::from_spec(parse_kv_scheme("pq:bits=2"), shape).window, PqKvParams{}.window);
    // A given key the budget cannot take is out of reach, with the lowest value of the given keys.
    const std::string e = test::error_of([&] { PqKvParams::from_spec(parse_kv_scheme("pq:bits=1,wq=f16,window=256"), shape, 1024); });
    EXPECT_NE(e.find("out of reach"), std::string::npos) << e;
    EXPECT_GT(lowest_named(e), 1.0) << e;
}

TEST(PqBudgetSolver, PeakPointsEqualATokenByTokenScan) {
    const KvShape shape = austen_shape();
    for (const std::string spec : {"pq:m=32,refresh=512,calib=200", "pq:m=16,refresh=0,window=100,page=64",
                                   "pq:m=32,refresh=256,versions=3,f16_layers=1,wq=q8_0", "pq:m=8,calib=64,sinks=0"}) {
        const PqKvParams p = PqKvParams::from_spec(parse_kv_scheme(spec), shape);
        for (std::int64_t ctx : {100, 1000, 3000}) {
            const kv::PqLayout L = kv::make_pq_layout(p, shape, ctx);
            std::uint64_t scan = 0;
            for (std::int64_t n = 1; n <= ctx; ++n) scan = std::max(scan, kv::pq_footprint_parts(p, shape, L, n).total());
            EXPECT_EQ(kv::pq_peak_footprint(p, shape, L, ctx).bytes, scan) << spec << " at " << ctx;
        }
    }
}

TEST(PqBudgetSolver, ACacheHoldsNoMoreThanTheBudgetOnItsWay) {
    const KvShape shape{2, 1, 64};
    const std::int64_t ctx = 512;
    auto cache = make_kv_cache(parse_kv_scheme("pq:bits=2"), shape, KvCacheOptions{0, ctx});
    cache->add_sequence(0);
    const double budget = 2.0 * double(ctx) * double(shape.elements_per_token()) / 8.0;
    for (std::int64_t n = 0; n < ctx; ++n) {
        for (int il = 0; il < shape.n_layer; ++il) {
            const std::vector<float> k = test::gaussian(std::size_t(shape.head_dim), std::uint64_t(2 * (n * 8 + il))),
                                     v = test::gaussian(std::size_t(shape.head_dim), std::uint64_t(2 * (n * 8 + il) + 1));
            cache->append(il, 0, 1, k.data(), v.data());
        }
        std::uint64_t held = 0;
        for (const auto& [part, bytes] : cache->memory().parts)
            if (part != "free pool pages") held += bytes;
        ASSERT_LE(double(held), budget) << "at " << n + 1 << " tokens";
    }
}
