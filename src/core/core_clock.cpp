// measure_core_clock (aqpim/bench_util.h): the clock a core runs at and the vector adds it
// retires per second, from dependent and independent add chains.

#include "core/core_clock.h"

#include <algorithm>
#include <chrono>

#include "aqpim/bench_util.h"
#include "aqpim/simd.h"

namespace aqpim {

std::uint64_t add_loop_ref(std::uint64_t iterations, bool independent) {
    // Register operands, not immediates: some cores fold chains of immediate adds at rename.
    std::uint64_t a = 1, b = 1, c = 1, d = 1;
    const std::uint64_t y = 3;
    if (independent)
        asm volatile(AQPIM_ADD_LOOP(AQPIM_SCALAR_ADD, "a", "b", "c", "d", "a", "b", "c", "d")
                     : [a] "+r"(a), [b] "+r"(b), [c] "+r"(c), [d] "+r"(d), [n] "+r"(iterations)
                     : [y] "r"(y));
    else
        asm volatile(AQPIM_ADD_LOOP(AQPIM_SCALAR_ADD, "a", "a", "a", "a", "a", "a", "a", "a")
                     : [a] "+r"(a), [n] "+r"(iterations)
                     : [y] "r"(y));
    return a + b + c + d;
}

CoreClock measure_core_clock() {
    using Fn = std::uint64_t (*)(std::uint64_t, bool);
    static const Fn table[3] = {add_loop_ref, add_loop_avx2, add_loop_avx512};
    const Fn adds = dispatch(table);
    // Many short runs, the best of each kind: on a shared VM a quiet 3 ms window is likely among them.
    constexpr std::uint64_t kIterations = 1'000'000;  // 8 M adds: about 3 ms as one chain at 2.5 GHz
    constexpr int kRuns = 20;
    volatile std::uint64_t sink = adds(kIterations / 4, false);  // wake the core to its working clock
    auto best_rate = [&](bool independent) {
        double best = 0;
        for (int run = 0; run < kRuns; ++run) {
            const auto t0 = std::chrono::steady_clock::now();
            sink = sink + adds(kIterations, independent);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best = std::max(best, 8.0 * double(kIterations) / s / 1e9);
        }
        return best;
    };
    CoreClock c;
    c.ghz = best_rate(false);
    c.vector_gops = best_rate(true);
    return c;
}

}  // namespace aqpim
