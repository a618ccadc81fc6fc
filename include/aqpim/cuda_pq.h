#pragma once
// The CUDA kernels' view of a trained ProductQuantizer (src/cuda, docs/cuda.md): 4-bit codes in
// the pq_codes.h block layout, codebooks in quantizer space, and the transform reduced to a
// permutation and a per-channel gain (scale folding). Rotated quantizers are not supported there.

#include <cstdint>
#include <vector>

#include "aqpim/pq.h"

namespace aqpim {

/// One codebook version as the CUDA kernels read it.
struct CudaCodebook {
    int M = 0;
    std::vector<float> centroids;    ///< [M][16][dsub] quantizer space
    std::vector<std::int32_t> perm;  ///< [D] y[i] = x[perm[i]] / gain[perm[i]] (identity when none)
    std::vector<float> gain;         ///< [D] per-channel scale s (ones when scale folding is off)
};

/// Throws aqpim::Error naming the parameter when the quantizer is untrained, not 4-bit, rotated,
/// has M > 64, or a head_dim other than 64 or 128.
CudaCodebook cuda_codebook(const ProductQuantizer& pq);

}  // namespace aqpim
