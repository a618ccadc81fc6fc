// Nearest centroid, AVX2: 8 strided points per block, gathered into registers (SoA), then
// nearest8 (pq/nearest_block_avx2.h) against centroids broadcast from memory.

#include <climits>

#include "aqpim/aligned.h"
#include "pq/nearest_block_avx2.h"
#include "pq/nearest_kernels.h"
#include "simd/static_dispatch.h"

namespace aqpim {
namespace {

using avx2::Nearest8;

/// xm2 [dim] receives the points x + i * x_stride (i < 8, lanes in `valid`) times -2; returns
/// their ||x||^2. Gathers when lane offsets fit in int32, else copies lane by lane.
template <int DIM>
inline __m256 load_block(const float* x, std::int64_t x_stride, int dim_rt, int n_valid, __m256i valid, bool gather,
                         __m256i offsets, __m256* xm2) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    const __m256 minus2 = _mm256_set1_ps(-2.0f);
    __m256 norm = _mm256_setzero_ps();
    for (int d = 0; d < dim; ++d) {
        __m256 v;
        if (gather) {
            v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), x + d, offsets, _mm256_castsi256_ps(valid), 4);
        } else {
            alignas(32) float lane[8] = {};
            for (int i = 0; i < n_valid; ++i) lane[i] = x[i * x_stride + d];
            v = _mm256_load_ps(lane);
        }
        norm = _mm256_fmadd_ps(v, v, norm);
        xm2[d] = _mm256_mul_ps(v, minus2);
    }
    return norm;
}

template <int DIM>
void nearest_impl(const float* x, std::int64_t n, std::int64_t x_stride, int dim_rt, const float* centroids,
                  const float* c_norms, int k, std::int32_t* idx, float* dist) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    avx2::PointTile<avx2::kUnrolledDim<DIM> ? DIM : 0> tile;
    __m256* xm2 = tile.get(dim);

    const bool gather = x_stride >= 0 && x_stride <= INT_MAX / 8;
    const __m256i offsets =
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(gather ? int(x_stride) : 0));
    for (std::int64_t i0 = 0; i0 < n; i0 += 8) {
        const int n_valid = n - i0 >= 8 ? 8 : int(n - i0);
        const __m256i valid = avx2::lanes_below(n_valid);
        __m256 norm = load_block<DIM>(x + i0 * x_stride, x_stride, dim, n_valid, valid, gather, offsets, xm2);
        Nearest8 r = avx2::nearest8<DIM>(xm2, dim, centroids, c_norms, k);
        __m256 d2 = _mm256_max_ps(_mm256_add_ps(r.dist, norm), _mm256_setzero_ps());
        if (n_valid == 8) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + i0), r.idx);
            if (dist) _mm256_storeu_ps(dist + i0, d2);
        } else {
            _mm256_maskstore_epi32(idx + i0, valid, r.idx);
            if (dist) _mm256_maskstore_ps(dist + i0, valid, d2);
        }
    }
}

}  // namespace

void nearest_avx2(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                  const float* c_norms, int k, std::int32_t* idx, float* dist) {
    return with_constant<1, 2, 3, 4, 5, 6, 7, 8>(
        dim, [&](auto DIM) { return nearest_impl<DIM()>(x, n, x_stride, dim, centroids, c_norms, k, idx, dist); });
}

}  // namespace aqpim
