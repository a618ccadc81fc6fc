#pragma once
// Walking the subspaces of a 4-bit code group (aqpim/pq_codes.h) with the subspace's position in
// the group as a compile-time constant (it selects the shift that exposes its nibbles).

#include <type_traits>

namespace aqpim {

/// f(std::integral_constant<int, J>{}) for J < n (n <= 4), unrolled.
template <class F>
inline void for_subspaces_in_group(int n, F&& f) {
    f(std::integral_constant<int, 0>{});
    if (n > 1) f(std::integral_constant<int, 1>{});
    if (n > 2) f(std::integral_constant<int, 2>{});
    if (n > 3) f(std::integral_constant<int, 3>{});
}

}  // namespace aqpim
