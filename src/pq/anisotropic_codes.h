#pragma once
// Score-aware coding of keys: the codes of a key chosen for the score it gives a query along
// itself, not only for its distance (docs/kv-pq.md, "Anisotropic key codes").
//
// k-means centroids are cell means, so the nearest-centroid code of a key far out in its cell
// reconstructs a shorter key: x·x̂ < x·x, and the query that should find this key (one along its
// own direction, the case retrieval depends on) scores it low. The refinement trades some distance
// for that score, as ScaNN's anisotropic loss does for inner-product search.

#include <cstdint>

#include "aqpim/pq.h"

namespace aqpim {

class Workspace;

/// Refines `codes` [n][M] of rows x [n][D] (original space) coded by `q` against `centroids`
/// [M][ksub][dsub] (q's own or a widened copy, in q's quantizer space) by coordinate descent, one
/// subspace at a time, on
///
///     ||y - ŷ||² + lambda · (u · (y - ŷ))² / ||u||²
///
/// where y = q.forward(x), ŷ the concatenated centroids of the codes and u = q.transform_query(x),
/// so that u · (y - ŷ) = x·x - x·x̂: the error of the key's score against a query along itself.
/// Starts from the given codes (nearest centroid is the optimum at lambda = 0) and sweeps the
/// subspaces until a sweep changes nothing or `max_sweeps` ran; a code changes only when the loss
/// strictly drops, so the result depends on the row alone (not on the batch it was coded in).
/// lambda must be >= 0; lambda = 0 leaves the codes as they are. Its buffers (the codebooks as
/// columns, the rows transformed, per-row tables) are a part of `ws` (aqpim/workspace.h), else
/// allocated for the call.
void refine_codes_anisotropic(const ProductQuantizer& q, const float* centroids, const float* x, std::int64_t n,
                              double lambda, std::uint8_t* codes, int max_sweeps = 4, Workspace* ws = nullptr);

}  // namespace aqpim
