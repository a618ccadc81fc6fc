#include <limits>

#include "aqpim/kmeans.h"
#include "pq/nearest_kernels.h"

namespace aqpim {

void nearest_ref(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                 const float* c_norms, int k, std::int32_t* idx, float* dist) {
    for (std::int64_t i = 0; i < n; ++i) {
        const float* xi = x + i * x_stride;
        float x_norm = 0;
        for (int d = 0; d < dim; ++d) x_norm += xi[d] * xi[d];
        float best = std::numeric_limits<float>::infinity();
        std::int32_t best_j = 0;
        for (int j = 0; j < k; ++j) {
            const float* c = centroids + std::int64_t(j) * dim;
            float dot = 0;
            for (int d = 0; d < dim; ++d) dot += xi[d] * c[d];
            float dj = c_norms[j] - 2 * dot;
            if (dj < best) {
                best = dj;
                best_j = j;
            }
        }
        idx[i] = best_j;
        if (dist) {
            float d2 = best + x_norm;
            dist[i] = d2 > 0 ? d2 : 0;
        }
    }
}

namespace {
const NearestKernels kTables[3] = {{nearest_ref}, {nearest_avx2}, {nearest_avx512}};
}

const NearestKernels& nearest_kernels(SimdLevel level) { return kTables[static_cast<int>(level)]; }

void nearest_centroid(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                      const float* c_norms, int k, std::int32_t* idx, float* dist) {
    dispatch(kTables).nearest(x, n, x_stride, dim, centroids, c_norms, k, idx, dist);
}

}  // namespace aqpim
