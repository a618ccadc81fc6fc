#include "pq/subspace_plan.h"

#include <algorithm>
#include <numeric>

#include "aqpim/error.h"

namespace aqpim {

void check_subspace_plan(int D, int M, RopePairs pairs) {
    AQPIM_CHECK(D >= 1, "D={}: expected >= 1", D);
    AQPIM_CHECK(M >= 1, "M={}: expected >= 1", M);
    AQPIM_CHECK(D % M == 0, "D={} is not divisible by M={}", D, M);
    if (pairs != RopePairs::none) {
        AQPIM_CHECK(D % 2 == 0, "D={}: RoPE pairs need an even D", D);
        AQPIM_CHECK((D / M) % 2 == 0, "dsub={} (D={}, M={}): RoPE pairs need an even dsub so no pair is split",
                    D / M, D, M);
    }
}

namespace {

// units [n_units][unit] dims of z, in the natural order (pairs adjacent for interleaved).
std::vector<std::int32_t> make_units(int D, RopePairs pairs, int& unit) {
    std::vector<std::int32_t> dims(D);
    unit = pairs == RopePairs::none ? 1 : 2;
    for (int u = 0; u < D / unit; ++u) {
        switch (pairs) {
            case RopePairs::none: dims[u] = u; break;
            case RopePairs::interleaved: dims[2 * u] = 2 * u, dims[2 * u + 1] = 2 * u + 1; break;
            case RopePairs::neox: dims[2 * u] = u, dims[2 * u + 1] = u + D / 2; break;
        }
    }
    return dims;
}

}  // namespace

std::vector<std::int32_t> make_subspace_plan(int D, int M, RopePairs pairs, SubspaceOrder order, const float* var) {
    check_subspace_plan(D, M, pairs);
    int unit = 1;
    std::vector<std::int32_t> units = make_units(D, pairs, unit);  // [n_units][unit]
    if (order == SubspaceOrder::contiguous) return units;

    AQPIM_ASSERT(var != nullptr);
    const int n_units = D / unit, per_sub = D / M / unit;
    std::vector<double> unit_var(n_units, 0.0);
    for (int u = 0; u < n_units; ++u)
        for (int j = 0; j < unit; ++j) unit_var[u] += var[units[u * unit + j]];
    std::vector<int> by_var(n_units);
    std::iota(by_var.begin(), by_var.end(), 0);
    std::stable_sort(by_var.begin(), by_var.end(), [&](int a, int b) { return unit_var[a] > unit_var[b]; });

    std::vector<double> sub_var(M, 0.0);
    std::vector<std::vector<int>> sub_units(M);  // [M][per_sub] unit indices
    for (int u : by_var) {
        int best = -1;
        for (int m = 0; m < M; ++m)
            if (int(sub_units[m].size()) < per_sub && (best < 0 || sub_var[m] < sub_var[best])) best = m;
        AQPIM_ASSERT(best >= 0);
        sub_units[best].push_back(u);
        sub_var[best] += unit_var[u];
    }
    std::vector<std::int32_t> perm;
    perm.reserve(D);
    for (auto& su : sub_units) {
        std::sort(su.begin(), su.end());  // unit index order == first-dim order
        for (int u : su)
            for (int j = 0; j < unit; ++j) perm.push_back(units[u * unit + j]);
    }
    return perm;
}

bool is_permutation(std::span<const std::int32_t> perm) {
    std::vector<char> seen(perm.size(), 0);
    for (std::int32_t p : perm) {
        if (p < 0 || std::size_t(p) >= perm.size() || seen[p]) return false;
        seen[p] = 1;
    }
    return true;
}

bool plan_keeps_pairs(std::span<const std::int32_t> perm, int M, RopePairs pairs) {
    if (pairs == RopePairs::none) return true;
    const int D = int(perm.size()), ds = D / M;
    if (M < 1 || D % M != 0 || D % 2 != 0 || !is_permutation(perm)) return false;
    std::vector<int> sub_of(D);  // [D] subspace holding dim d of z
    for (int i = 0; i < D; ++i) sub_of[perm[i]] = i / ds;
    for (int u = 0; u < D / 2; ++u) {
        int a = pairs == RopePairs::interleaved ? 2 * u : u;
        int b = pairs == RopePairs::interleaved ? 2 * u + 1 : u + D / 2;
        if (sub_of[a] != sub_of[b]) return false;
    }
    return true;
}

bool is_identity_permutation(std::span<const std::int32_t> perm) {
    for (std::size_t i = 0; i < perm.size(); ++i)
        if (perm[i] != std::int32_t(i)) return false;
    return true;
}

}  // namespace aqpim
