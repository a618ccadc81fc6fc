#pragma once
// Subspace plans: which dims of the (scaled, rotated) vector z go to which of the M subspaces.
// A plan is a permutation perm [D] with y[i] = z[perm[i]]; subspace m holds y[m*dsub, (m+1)*dsub).
//
// Units are what the plan moves around: single dims, or RoPE pairs kept together in one subspace
// (interleaved (2i, 2i+1) or NeoX (i, i + D/2)). Inside a subspace, units are in increasing order of
// their first dim and a pair's dims are adjacent (first dim, then its partner).

#include <cstdint>
#include <span>
#include <vector>

#include "aqpim/pq.h"

namespace aqpim {

/// Throws aqpim::Error unless (D, M, pairs) admit a plan: D % M == 0 and, with RoPE pairs, D and
/// dsub = D / M even.
void check_subspace_plan(int D, int M, RopePairs pairs);

/// The plan's permutation [D] (y[i] = z[perm[i]]).
///   var  [D] per-dim variance of z; read only for SubspaceOrder::variance_balanced (else may be nullptr)
/// contiguous: units in order. variance_balanced: units by decreasing variance (ties: lower dim first),
/// each to the subspace with the least total variance that still has room (ties: lower m), so every
/// subspace gets exactly dsub dims.
std::vector<std::int32_t> make_subspace_plan(int D, int M, RopePairs pairs, SubspaceOrder order, const float* var);

/// True if perm holds each of 0..perm.size()-1 exactly once.
bool is_permutation(std::span<const std::int32_t> perm);
/// True if every RoPE pair (see RopePairs) of the D = perm.size() dims lands in one subspace of
/// dsub = D / M dims under perm. Always true for RopePairs::none.
bool plan_keeps_pairs(std::span<const std::int32_t> perm, int M, RopePairs pairs);
/// True if perm[i] == i for all i.
bool is_identity_permutation(std::span<const std::int32_t> perm);

}  // namespace aqpim
