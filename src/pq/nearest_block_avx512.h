#pragma once
// The AVX-512 nearest-centroid block shared by nearest_avx512.cpp (PQ encoding) and
// kmeans_avx512.cpp (Lloyd assignment). Include only from files compiled with AVX-512 flags.
//
// 16 points at once, one per lane: for each centroid j, d_j = ||c_j||^2 + sum_d (-2 x_d) c_jd
// (dim FMAs with c_jd broadcast from memory), running minimum and its index kept in registers.
// Four independent running minima over four contiguous ranges of centroids shorten the
// compare/select dependency chain; merging them in range order with a strict < keeps the lowest
// index on ties, as the reference does.

#include <immintrin.h>

// GCC 12 reports the _mm512_undefined_* pass-through operands of its AVX-512 intrinsics as
// uninitialised (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cstdint>

#include "aqpim/aligned.h"

namespace aqpim::avx512 {

/// Dims kept in registers and fully unrolled (a template argument of 0 means any dim, read from
/// memory).
template <int DIM>
inline constexpr bool kUnrolledDim = DIM > 0 && DIM <= 16;

/// The points of a block, times -2, one register per coordinate: [dim] vectors. Unrolled dims
/// live in registers; any other dim in a tile on the stack (up to kStackDims), else on the heap.
template <int DIM>
struct PointTile {
    __m512 r[DIM];
    __m512* get(int) { return r; }
};
template <>
struct PointTile<0> {
    static constexpr int kStackDims = 64;
    __m512 stack[kStackDims];
    AlignedBuffer<float> heap;
    __m512* get(int dim) {
        if (dim <= kStackDims) return stack;
        heap.resize(std::size_t(dim) * 16);
        return reinterpret_cast<__m512*>(heap.data());
    }
};

struct Nearest16 {
    __m512 dist;  ///< ||c||^2 - 2 x.c of the nearest centroid (add ||x||^2 for the squared distance)
    __m512i idx;  ///< its index
};

/// xm2 [dim] (registers or memory): the 16 points times -2, coordinate d in xm2[d].
/// c [k][dim] row-major, cn [k] = ||c_j||^2, k >= 1.
template <int DIM>
inline Nearest16 nearest16(const __m512* xm2, int dim_rt, const float* c, const float* cn, int k) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    auto dist = [&](int j) {
        const float* cj = c + std::int64_t(j) * dim;
        __m512 acc = _mm512_set1_ps(cn[j]);
        for (int d = 0; d < dim; ++d) acc = _mm512_fmadd_ps(xm2[d], _mm512_set1_ps(cj[d]), acc);
        return acc;
    };
    auto take = [](__m512 dj, int j, __m512& best, __m512i& idx) {
        __mmask16 m = _mm512_cmp_ps_mask(dj, best, _CMP_LT_OQ);
        best = _mm512_min_ps(dj, best);
        idx = _mm512_mask_set1_epi32(idx, m, j);
    };
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    __m512 b0 = inf, b1 = inf, b2 = inf, b3 = inf;
    __m512i i0 = _mm512_setzero_si512(), i1 = i0, i2 = i0, i3 = i0;
    const int q = k / 4;  // chains r < 3 take [r q, (r+1) q), chain 3 takes [3 q, k)
    for (int t = 0; t < q; ++t) {
        __m512 d0 = dist(t), d1 = dist(q + t), d2 = dist(2 * q + t), d3 = dist(3 * q + t);
        take(d0, t, b0, i0);
        take(d1, q + t, b1, i1);
        take(d2, 2 * q + t, b2, i2);
        take(d3, 3 * q + t, b3, i3);
    }
    for (int j = 4 * q; j < k; ++j) take(dist(j), j, b3, i3);
    auto merge = [](__m512& best, __m512i& idx, __m512 b, __m512i i) {
        __mmask16 m = _mm512_cmp_ps_mask(b, best, _CMP_LT_OQ);
        best = _mm512_min_ps(b, best);
        idx = _mm512_mask_mov_epi32(idx, m, i);
    };
    merge(b0, i0, b1, i1);
    merge(b0, i0, b2, i2);
    merge(b0, i0, b3, i3);
    return {b0, i0};
}

/// Horizontal sums (GCC 12 warns about _mm512_reduce_add_*'s undefined upper halves).
inline float hsum(__m512 v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0xee)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
}
inline double hsum(__m512d v) {
    __m512 f = _mm512_castpd_ps(v);
    __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(v),
                               _mm256_castps_pd(_mm512_castps512_ps256(_mm512_shuffle_f32x4(f, f, 0xee))));
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

/// Inclusive prefix sums of the 16 lanes.
inline __m512 prefix16(__m512 v) {
    const __m512i z = _mm512_setzero_si512();
    v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 15)));  // lane i-1
    v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 14)));
    v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 12)));
    return _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 8)));
}

/// Lanes [0, n) of a block of 16, n may be <= 0 or >= 16.
inline __mmask16 lanes_below(std::int64_t n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

}  // namespace aqpim::avx512
