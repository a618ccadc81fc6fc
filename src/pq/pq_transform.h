#pragma once
// The per-vector space transforms of a ProductQuantizer (see aqpim/pq.h), over borrowed arrays.
// Scale, Hadamard signs and the Hadamard normalisation are folded into two gain vectors:
//
//   c = 1/sqrt(D) with the Hadamard rotation, else 1;  signs = 1 without it;  s = 1 without scale folding
//   key_gain   = c · signs / s      forward:   y = P · Rm · H? (key_gain ∘ x)
//   query_gain = c · signs ∘ s      queries:   qy = P · Rm · H? (query_gain ∘ q)
//                                   inverse:   x = query_gain ∘ H? (Rmᵀ · (Pᵀ · y))
//
// where H? is the unnormalised Walsh-Hadamard transform (Hadamard rotation only) and Rm the
// random orthogonal matrix (random_orthogonal only). The inverse reuses query_gain because
// (H · diag(c · signs / s))⁻¹ = diag(s · signs · c) · H (H · H = D · I).
//
// Every function reads its whole input before writing its output, so input and output may alias.

#include <cstdint>

namespace aqpim {

struct PqTransform {
    int D = 0;
    const float* key_gain = nullptr;     ///< [D], or nullptr (all ones)
    const float* query_gain = nullptr;   ///< [D], or nullptr (all ones)
    bool hadamard = false;               ///< apply the Walsh-Hadamard transform (D a power of two)
    const float* rotation = nullptr;     ///< [D][D] row-major Rm, or nullptr
    const std::int32_t* perm = nullptr;  ///< [D] y[i] = z[perm[i]], or nullptr (identity)

    /// y [D] = P · Rm · H? (gain ∘ x); gain is key_gain (keys) or query_gain (queries). scratch [2*D].
    void forward_one(const float* x, const float* gain, float* y, float* scratch) const;
    /// x [D] = query_gain ∘ H? (Rmᵀ · (Pᵀ · y)). scratch [2*D].
    void inverse_one(const float* y, float* x, float* scratch) const;
};

}  // namespace aqpim
