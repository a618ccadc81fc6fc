#pragma once
// Orthogonal rotations applied before the subspace split (they spread outlier channels over all
// dims so no subspace is dominated by one).
//
//   Hadamard:          R = H · diag(signs) / sqrt(D),  H the Sylvester Walsh-Hadamard matrix
//                      (symmetric, H·H = D·I), signs random ±1; D must be a power of two. O(D log D).
//   random orthogonal: R [D][D] row-major, Gram-Schmidt (in double, twice) of a Gaussian matrix. O(D²).
// Both are deterministic for a seed (own RNG, independent of the standard library).

#include <cstdint>
#include <vector>

namespace aqpim {

inline bool is_power_of_two(std::int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

/// In place, unnormalised: x [D] <- H · x. D a power of two.
void fwht(float* x, int D);

/// Random signs [D], each +1 or -1, deterministic from seed.
std::vector<float> random_signs(int D, std::uint64_t seed);

/// In place, one vector x [D]: x <- R · x (transpose = false) or x <- Rᵀ · x (transpose = true),
/// R = H · diag(signs) / sqrt(D).
void hadamard_rotate(const float* signs, int D, float* x, bool transpose);

/// Random orthogonal matrix [D][D] row-major, deterministic from seed.
std::vector<float> random_orthogonal(int D, std::uint64_t seed);

/// n independent standard normal values, deterministic from seed (a stream unrelated to the
/// signs and matrix of the same seed).
std::vector<float> random_gaussian(std::size_t n, std::uint64_t seed);

/// One vector: y [D] = R · x (transpose = false) or Rᵀ · x; R [D][D] row-major. x and y must not overlap.
void matrix_rotate(const float* R, int D, const float* x, float* y, bool transpose);

}  // namespace aqpim
