#pragma once
// Small AVX2 helpers shared by kernel files compiled with the avx2 (or avx512) flags (include only
// from *_avx2.cpp / *_avx512.cpp and the per-ISA headers they include).

#include <immintrin.h>

namespace aqpim {

/// Sum of the 8 lanes.
inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

}  // namespace aqpim
