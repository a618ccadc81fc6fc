#pragma once
// Small SSE4.1 helpers for code compiled at the build's x86-64-v2 baseline (and any level above).

#include <smmintrin.h>

namespace aqpim::sse {

/// Smallest of the 4 lanes (a NaN lane may or may not win, as minps decides).
inline float hmin(__m128 v) {
    v = _mm_min_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_min_ss(v, _mm_shuffle_ps(v, v, 1)));
}

/// Largest of the 4 lanes (a NaN lane may or may not win, as maxps decides).
inline float hmax(__m128 v) {
    v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_max_ss(v, _mm_shuffle_ps(v, v, 1)));
}

}  // namespace aqpim::sse
