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

}  // namespace aqpim
