#pragma once
// Integer rounding used for pages, tiles, blocks and alignment: one definition.

#include <type_traits>

namespace aqpim {

/// ceil(a / b) for a >= 0, b > 0 (in the common type of the two).
template <class A, class B>
constexpr std::common_type_t<A, B> ceil_div(A a, B b) {
    using T = std::common_type_t<A, B>;
    return (T(a) + T(b) - 1) / T(b);
}

/// a rounded up to a multiple of b (a >= 0, b > 0).
template <class A, class B>
constexpr std::common_type_t<A, B> round_up(A a, B b) {
    return ceil_div(a, b) * std::common_type_t<A, B>(b);
}

}  // namespace aqpim
