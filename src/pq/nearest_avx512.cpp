// Nearest centroid, AVX-512: 16 strided points per block, gathered into registers (SoA), then
// nearest16 (pq/nearest_block_avx512.h) against centroids broadcast from memory.

#include <climits>

#include "aqpim/aligned.h"
#include "pq/nearest_block_avx512.h"
#include "pq/nearest_kernels.h"
#include "simd/static_dispatch.h"

namespace aqpim {
namespace {

using avx512::lanes_below;
using avx512::Nearest16;

/// xm2 [dim] receives the points x + i * x_stride (i < 16, lanes in `valid`) times -2; returns
/// their ||x||^2. Gathers when lane offsets fit in int32, else copies lane by lane.
template <int DIM>
inline __m512 load_block(const float* x, std::int64_t x_stride, int dim_rt, __mmask16 valid, bool gather,
                         __m512i offsets, __m512* xm2) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    const __m512 minus2 = _mm512_set1_ps(-2.0f);
    __m512 norm = _mm512_setzero_ps();
    for (int d = 0; d < dim; ++d) {
        __m512 v;
        if (gather) {
            v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, offsets, x + d, 4);
        } else {
            alignas(64) float lane[16] = {};
            for (int i = 0; i < 16; ++i)
                if (valid >> i & 1) lane[i] = x[i * x_stride + d];
            v = _mm512_load_ps(lane);
        }
        norm = _mm512_fmadd_ps(v, v, norm);
        xm2[d] = _mm512_mul_ps(v, minus2);
    }
    return norm;
}

/// Full block of 16 points of 4 dims: 16 row loads and an in-lane 4x4 transpose instead of four
/// gathers. v[q] holds points q, 4 + q, 8 + q, 12 + q (one per 128-bit lane), so the transpose
/// leaves coordinate d of points 0..15, in order, in xm2[d].
inline __m512 load_block4(const float* x, std::int64_t x_stride, __m512* xm2) {
    __m512 v[4];
    for (int q = 0; q < 4; ++q) {
        const float* p = x + q * x_stride;
        __m512 r = _mm512_castps128_ps512(_mm_loadu_ps(p));
        r = _mm512_insertf32x4(r, _mm_loadu_ps(p + 4 * x_stride), 1);
        r = _mm512_insertf32x4(r, _mm_loadu_ps(p + 8 * x_stride), 2);
        v[q] = _mm512_insertf32x4(r, _mm_loadu_ps(p + 12 * x_stride), 3);
    }
    const __m512 t0 = _mm512_unpacklo_ps(v[0], v[1]), t1 = _mm512_unpackhi_ps(v[0], v[1]);
    const __m512 t2 = _mm512_unpacklo_ps(v[2], v[3]), t3 = _mm512_unpackhi_ps(v[2], v[3]);
    const __m512 x0 = _mm512_shuffle_ps(t0, t2, 0x44), x1 = _mm512_shuffle_ps(t0, t2, 0xee);
    const __m512 x2 = _mm512_shuffle_ps(t1, t3, 0x44), x3 = _mm512_shuffle_ps(t1, t3, 0xee);
    const __m512 minus2 = _mm512_set1_ps(-2.0f);
    xm2[0] = _mm512_mul_ps(x0, minus2);
    xm2[1] = _mm512_mul_ps(x1, minus2);
    xm2[2] = _mm512_mul_ps(x2, minus2);
    xm2[3] = _mm512_mul_ps(x3, minus2);
    return _mm512_fmadd_ps(x3, x3, _mm512_fmadd_ps(x2, x2, _mm512_fmadd_ps(x1, x1, _mm512_mul_ps(x0, x0))));
}

template <int DIM>
void nearest_impl(const float* x, std::int64_t n, std::int64_t x_stride, int dim_rt, const float* centroids,
                  const float* c_norms, int k, std::int32_t* idx, float* dist) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    avx512::PointTile<avx512::kUnrolledDim<DIM> ? DIM : 0> tile;
    __m512* xm2 = tile.get(dim);

    const bool gather = x_stride >= 0 && x_stride <= INT_MAX / 16;
    const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(gather ? int(x_stride) : 0));
    for (std::int64_t i0 = 0; i0 < n; i0 += 16) {
        const __mmask16 valid = lanes_below(n - i0);
        __m512 norm = DIM == 4 && valid == 0xffff
                          ? load_block4(x + i0 * x_stride, x_stride, xm2)
                          : load_block<DIM>(x + i0 * x_stride, x_stride, dim, valid, gather, offsets, xm2);
        Nearest16 r = avx512::nearest16<DIM>(xm2, dim, centroids, c_norms, k);
        _mm512_mask_storeu_epi32(idx + i0, valid, r.idx);
        if (dist)
            _mm512_mask_storeu_ps(dist + i0, valid, _mm512_max_ps(_mm512_add_ps(r.dist, norm), _mm512_setzero_ps()));
    }
}

}  // namespace

void nearest_row16_avx512(const float* y, int M, int dsub, const float* centroids, const float* c_norms,
                          std::uint8_t* codes) {
    // Centroid j in lane j: d_j = ||c_j||^2 + sum_d (-2 y_d) c_jd, the FMAs in nearest16's order on
    // the same operands (so the same bits), with coordinate d of the 16 centroids gathered into
    // one register; the lowest lane holding the minimum is nearest16's lowest index on ties.
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(dsub));
    for (int m = 0; m < M; ++m) {
        const float* c = centroids + std::int64_t(m) * 16 * dsub;
        const float* x = y + std::int64_t(m) * dsub;
        __m512 acc = _mm512_loadu_ps(c_norms + std::int64_t(m) * 16);
        for (int d = 0; d < dsub; ++d)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(x[d] * -2.0f), _mm512_i32gather_ps(offsets, c + d, 4), acc);
        const float best = _mm512_reduce_min_ps(acc);
        const __mmask16 at = _mm512_cmp_ps_mask(acc, _mm512_set1_ps(best), _CMP_EQ_OQ);
        codes[m] = std::uint8_t(at ? __builtin_ctz(unsigned(at)) : 0);  // no lane equal: NaNs, index 0 as nearest16
    }
}

void nearest_avx512(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                    const float* c_norms, int k, std::int32_t* idx, float* dist) {
    return with_constant<1, 2, 3, 4, 5, 6, 7, 8, 16>(
        dim, [&](auto DIM) { return nearest_impl<DIM()>(x, n, x_stride, dim, centroids, c_norms, k, idx, dist); });
}

}  // namespace aqpim
