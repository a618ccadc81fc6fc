#pragma once
// TurboQuant's scalar codebooks (Zandieh et al., arXiv 2504.19874): after a uniformly random
// rotation, one coordinate x of a unit vector in R^dim has the density
//     f(x) = Γ(dim/2) / (√π Γ((dim-1)/2)) · (1 - x²)^((dim-3)/2),   x ∈ [-1, 1]
// (a Beta distribution on the sphere, ≈ N(0, 1/dim) for large dim). The codebook of b bits is the
// Lloyd-Max quantizer of f: the 2^b centroids minimising E (x - c(x))², computed once per (dim, b)
// from the density alone (nothing calibrated on data).

#include <vector>

namespace aqpim::kv {

struct SphereCodebook {
    int dim = 0;
    int bits = 0;
    std::vector<float> centroids;  ///< [2^bits] ascending, symmetric about 0 (bits 0: {0})
    std::vector<float> bounds;     ///< [2^bits - 1] decision thresholds: midpoints of neighbouring centroids
    double mse = 0;                ///< E (x - c(x))² per coordinate under f (times dim: the error of a unit vector)

    /// Index of the centroid nearest to x: the number of thresholds below x.
    int index(float x) const {
        int i = 0;
        for (float b : bounds) i += x > b;
        return i;
    }
};

/// The codebook for one coordinate of a uniform unit vector of R^dim (dim >= 2, bits 0..8, else
/// aqpim::Error). Computed on first use and kept for the process (thread-safe); the reference stays valid.
const SphereCodebook& sphere_codebook(int dim, int bits);

}  // namespace aqpim::kv
