#pragma once
// The AVX2 nearest-centroid block shared by nearest_avx2.cpp and kmeans_avx2.cpp (include only
// from files compiled with AVX2 flags): as pq/nearest_block_avx512.h with 8 points per block and
// two running minima (over centroids [0, k/2) and [k/2, k)), merged with a strict < so ties keep
// the lowest index.

#include <immintrin.h>

#include <cstdint>

#include "aqpim/aligned.h"
#include "simd/avx2_util.h"

namespace aqpim::avx2 {

/// Dims kept in registers and fully unrolled (0 = any dim, read from memory).
template <int DIM>
inline constexpr bool kUnrolledDim = DIM > 0 && DIM <= 8;

/// The points of a block, times -2, one register per coordinate: [dim] vectors. Unrolled dims
/// live in registers; any other dim in a tile on the stack (up to kStackDims), else on the heap.
template <int DIM>
struct PointTile {
    __m256 r[DIM];
    __m256* get(int) { return r; }
};
template <>
struct PointTile<0> {
    static constexpr int kStackDims = 64;
    __m256 stack[kStackDims];
    AlignedBuffer<float> heap;
    __m256* get(int dim) {
        if (dim <= kStackDims) return stack;
        heap.resize(std::size_t(dim) * 8);
        return reinterpret_cast<__m256*>(heap.data());
    }
};

struct Nearest8 {
    __m256 dist;  ///< ||c||^2 - 2 x.c of the nearest centroid
    __m256i idx;  ///< its index
};

/// xm2 [dim]: the 8 points times -2, coordinate d in xm2[d]. c [k][dim], cn [k], k >= 1.
template <int DIM>
inline Nearest8 nearest8(const __m256* xm2, int dim_rt, const float* c, const float* cn, int k) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    auto dist = [&](int j) {
        const float* cj = c + std::int64_t(j) * dim;
        __m256 acc = _mm256_broadcast_ss(cn + j);
        for (int d = 0; d < dim; ++d) acc = _mm256_fmadd_ps(xm2[d], _mm256_broadcast_ss(cj + d), acc);
        return acc;
    };
    auto take = [](__m256 dj, __m256i j, __m256& best, __m256i& idx) {
        __m256 m = _mm256_cmp_ps(dj, best, _CMP_LT_OQ);
        best = _mm256_min_ps(dj, best);
        idx = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(idx), _mm256_castsi256_ps(j), m));
    };
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    const __m256i one = _mm256_set1_epi32(1);
    const int h = k / 2;
    __m256 b0 = inf, b1 = inf;
    __m256i i0 = _mm256_setzero_si256(), i1 = i0, j0 = i0, j1 = _mm256_set1_epi32(h);
    for (int t = 0; t < h; ++t) {
        __m256 d0 = dist(t), d1 = dist(h + t);
        take(d0, j0, b0, i0);
        take(d1, j1, b1, i1);
        j0 = _mm256_add_epi32(j0, one);
        j1 = _mm256_add_epi32(j1, one);
    }
    for (int j = 2 * h; j < k; ++j) take(dist(j), j1, b1, i1);  // odd k: j1 == 2h here
    __m256 m = _mm256_cmp_ps(b1, b0, _CMP_LT_OQ);
    b0 = _mm256_min_ps(b1, b0);
    i0 = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(i0), _mm256_castsi256_ps(i1), m));
    return {b0, i0};
}

/// All-ones in lanes [0, n) of a block of 8 (n may be <= 0 or >= 8).
inline __m256i lanes_below(std::int64_t n) {
    int m = n >= 8 ? 8 : n <= 0 ? 0 : int(n);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

using aqpim::hsum;  // the float one (simd/avx2_util.h), beside this double one
inline double hsum(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
/// Inclusive prefix sums of the 8 lanes.
inline __m256 prefix8(__m256 v) {
    v = _mm256_add_ps(v, _mm256_castsi256_ps(_mm256_slli_si256(_mm256_castps_si256(v), 4)));  // within 128-bit halves
    v = _mm256_add_ps(v, _mm256_castsi256_ps(_mm256_slli_si256(_mm256_castps_si256(v), 8)));
    const __m256 low_total = _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(3));
    return _mm256_add_ps(v, _mm256_blend_ps(_mm256_setzero_ps(), low_total, 0xf0));
}
/// acc + the 8 lanes of v, in double.
inline __m256d widen_add(__m256d acc, __m256 v) {
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

}  // namespace aqpim::avx2
