#pragma once
// Small AVX-512 helpers shared by kernel files compiled with the avx512 flags (include only from
// *_avx512.cpp).

#include <immintrin.h>

#include <cstdint>

namespace aqpim {

/// Horizontal sums of four registers at once: [Σa, Σb, Σc, Σd] (about 19 uops instead of 4 x 8).
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
    auto half = [](__m512 x) { return _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1)); };
    const __m256 ab = _mm256_hadd_ps(half(a), half(b)), cd = _mm256_hadd_ps(half(c), half(d));
    const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a b c d in both 128-bit lanes
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/// out[h * D + j] += the lane sum of acc[h][j], for NQ rows of ND <= 4 consecutive outputs (the
/// value passes' accumulators of one subspace's dims, closed once per tile).
template <int NQ, int ND>
inline void add_lane_sums(const __m512 (&acc)[NQ][ND], float* out, std::int64_t D) {
    for (int h = 0; h < NQ; ++h) {
        float* o = out + std::int64_t(h) * D;
        if constexpr (ND == 4) {
            _mm_storeu_ps(o, _mm_add_ps(_mm_loadu_ps(o), reduce4(acc[h][0], acc[h][1], acc[h][2], acc[h][3])));
        } else {
            for (int j = 0; j < ND; ++j) o[j] += _mm512_reduce_add_ps(acc[h][j]);
        }
    }
}

/// Horizontal sums of sixteen registers at once, 3 uops per register instead of about 8: lane L of
/// the result is the sum of v[4 * (L % 4) + L / 4] (a 4 x 4 transpose of the indices, so a caller
/// that wants Σ x_L in lane L stores x_L's partial sums in v[4 * (L % 4) + L / 4]). Four levels of
/// "pair two registers, add the halves": 256-bit halves, 128-bit lanes, pairs, single floats.
inline __m512 transpose_sum16(const __m512 (&v)[16]) {
    auto fold256 = [](__m512 a, __m512 b) {  // [a.lo + a.hi | b.lo + b.hi]
        return _mm512_add_ps(_mm512_insertf32x8(a, _mm512_castps512_ps256(b), 1),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    };
    auto fold128 = [](__m512 a, __m512 b) {  // lanes [a0 + a1, a2 + a3, b0 + b1, b2 + b3]
        return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    };
    auto fold64 = [](__m512 a, __m512 b) {  // per 128-bit lane [a0 + a2, a1 + a3, b0 + b2, b1 + b3]
        return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    };
    auto fold32 = [](__m512 a, __m512 b) {  // per 128-bit lane [a0 + a1, a2 + a3, b0 + b1, b2 + b3]
        return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    };
    __m512 quarter[4];  // quarter[j]: v[4j..4j+3], 128-bit lane k holding v[4j + k]'s four partial sums
    for (int j = 0; j < 4; ++j)
        quarter[j] = fold128(fold256(v[4 * j], v[4 * j + 1]), fold256(v[4 * j + 2], v[4 * j + 3]));
    return fold32(fold64(quarter[0], quarter[1]), fold64(quarter[2], quarter[3]));
}

}  // namespace aqpim
