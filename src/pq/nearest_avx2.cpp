#include "pq/nearest_kernels.h"

namespace aqpim {

// Placeholder until the vectorised kernel lands: same results as the reference.
void nearest_avx2(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                  const float* c_norms, int k, std::int32_t* idx, float* dist) {
    nearest_ref(x, n, x_stride, dim, centroids, c_norms, k, idx, dist);
}

}  // namespace aqpim
