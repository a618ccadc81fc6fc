// parallel_for (src/core/threads.cpp): every index exactly once, whatever the thread count;
// exceptions come back to the caller; nested calls and calls from several threads at once work;
// thread_index stays below the thread count the call asked for.

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "aqpim/threads.h"

namespace aqpim {
namespace {

TEST(ParallelFor, RunsEveryIndexExactlyOnceAtEveryThreadCount) {
    for (int threads : {1, 2, 3, 8})
        for (std::int64_t n : {1, 2, 7, 64, 1000, 100003}) {
            std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
            parallel_for(n, [&](std::int64_t i) { hits[std::size_t(i)].fetch_add(1); }, threads);
            for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[std::size_t(i)].load(), 1) << "n=" << n << " i=" << i;
        }
}

TEST(ParallelFor, ThreadIndexIsBelowTheThreadCountAsked) {
    parallel_for(4096, [](std::int64_t) {}, 8);  // the pool now has 7 workers
    std::atomic<int> worst{0};
    parallel_for(
        4096,
        [&](std::int64_t) {
            int v = thread_index(), w = worst.load();
            while (v > w && !worst.compare_exchange_weak(w, v)) {}
        },
        2);
    EXPECT_LT(worst.load(), 2);
    EXPECT_EQ(thread_index(), 0);
}

TEST(ParallelFor, TheFirstExceptionReachesTheCallerAndThePoolStillWorks) {
    EXPECT_THROW(parallel_for(
                     100, [](std::int64_t i) { if (i == 37) throw std::runtime_error("index 37"); }, 2),
                 std::runtime_error);
    std::atomic<std::int64_t> sum{0};
    parallel_for(100, [&](std::int64_t i) { sum += i; }, 2);
    EXPECT_EQ(sum.load(), 4950);
}

TEST(ParallelFor, NestedCallsAndConcurrentCallersEachCoverTheirRange) {
    std::atomic<std::int64_t> inner{0};
    parallel_for(16, [&](std::int64_t) { parallel_for(10, [&](std::int64_t j) { inner += j; }, 2); }, 2);
    EXPECT_EQ(inner.load(), 16 * 45);
    std::vector<std::thread> callers;
    std::vector<std::int64_t> sums(4, 0);
    for (int c = 0; c < 4; ++c)
        callers.emplace_back([&, c] {
            for (int rep = 0; rep < 50; ++rep) {
                std::atomic<std::int64_t> s{0};
                parallel_for(257, [&](std::int64_t i) { s += i; }, 2);
                sums[std::size_t(c)] += s.load();
            }
        });
    for (std::thread& t : callers) t.join();
    for (std::int64_t s : sums) EXPECT_EQ(s, 50 * (256 * 257 / 2));
}

}  // namespace
}  // namespace aqpim
