#pragma once
// The CUDA kernels' view of a trained ProductQuantizer (src/cuda, docs/cuda.md): 4- or 8-bit codes in
// the pq_codes.h block layout, codebooks in quantizer space, and the transform as a permutation,
// a per-channel gain (scale folding) and, for rotated quantizers, a dense D x D rotation.

#include <cstdint>
#include <vector>

#include "aqpim/pq.h"

namespace aqpim {

/// One codebook version as the CUDA kernels read it.
struct CudaCodebook {
    int M = 0;
    int nbits = 4;                   ///< 4 or 8
    std::vector<float> centroids;    ///< [M][2^nbits][dsub] quantizer space
    std::vector<std::int32_t> perm;  ///< [D] y[i] = x[perm[i]] / gain[perm[i]] (identity when none)
    std::vector<float> gain;         ///< [D] per-channel scale s (ones when scale folding is off)
    std::vector<float> rotation;     ///< [D][D] R of y = P R (x / s), row-major; empty when none
};

/// Throws aqpim::Error naming the parameter when the quantizer is untrained, neither 4- nor 8-bit,
/// has M > 64 (8-bit: D / M > 16), or a head_dim other than 64 or 128. A Hadamard or random orthogonal rotation is
/// returned as the dense matrix the quantizer applies (read back from forward()).
CudaCodebook cuda_codebook(const ProductQuantizer& pq);

}  // namespace aqpim
