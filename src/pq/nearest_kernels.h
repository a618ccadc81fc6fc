#pragma once
// Per-ISA nearest-centroid kernels; see aqpim/kmeans.h for the contract.

#include <cstdint>

namespace aqpim {

void nearest_ref(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                 const float* c_norms, int k, std::int32_t* idx, float* dist);
void nearest_avx2(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                  const float* c_norms, int k, std::int32_t* idx, float* dist);
void nearest_avx512(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                    const float* c_norms, int k, std::int32_t* idx, float* dist);

/// One row y [M * dsub] against M codebooks of 16 centroids ([M][16][dsub], norms [M][16]): codes[m]
/// = nearest_avx512's index for subspace m, bit for bit, without a 16-point block for one point
/// (a decode step codes one row per stream).
void nearest_row16_avx512(const float* y, int M, int dsub, const float* centroids, const float* c_norms,
                          std::uint8_t* codes);

}  // namespace aqpim
