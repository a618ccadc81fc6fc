#pragma once
// Turning run-time sizes into compile-time constants, so kernels unroll for the common shapes
// without a hand-written switch in every file.

#include <algorithm>
#include <type_traits>

namespace aqpim {

/// f(std::integral_constant<int, V>{}) for the V in Values equal to x, else
/// f(std::integral_constant<int, 0>{}) (the generic path). Returns what f returns.
template <int... Values, class F>
inline decltype(auto) with_constant(int x, F&& f) {
    using R = decltype(f(std::integral_constant<int, 0>{}));
    if constexpr (std::is_void_v<R>) {
        const bool hit = ((x == Values ? (f(std::integral_constant<int, Values>{}), true) : false) || ...);
        if (!hit) f(std::integral_constant<int, 0>{});
    } else {
        R r{};
        const bool hit = ((x == Values ? (r = f(std::integral_constant<int, Values>{}), true) : false) || ...);
        if (!hit) r = f(std::integral_constant<int, 0>{});
        return r;
    }
}

/// f(std::integral_constant<int, N>{}) for N = n, 1 <= n <= Max.
template <int Max, class F>
inline void with_count(int n, F&& f) {
    if constexpr (Max > 1)
        if (n < Max) return with_count<Max - 1>(n, f);
    f(std::integral_constant<int, Max>{});
}

/// Splits n_q query heads into groups of at most G and calls f(NQ, h0) for each, NQ a
/// compile-time head count (kernels keep NQ heads' accumulators in registers).
template <int G, class F>
inline void for_head_groups(int n_q, F&& f) {
    for (int h0 = 0; h0 < n_q; h0 += G) with_count<G>(std::min(G, n_q - h0), [&](auto NQ) { f(NQ, h0); });
}

}  // namespace aqpim
