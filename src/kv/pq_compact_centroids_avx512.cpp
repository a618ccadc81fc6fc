// AVX-512 widening of int8 centroids (kv/pq_compact_centroids.h).

#include <immintrin.h>

#include <cstring>

#include "kv/pq_compact_centroids.h"

namespace aqpim::kv {

namespace {

/// scale[0..dsub) repeated over 16 lanes (dsub dividing 16): one broadcast.
__m512 scale_pattern(const float* s, int dsub) {
    switch (dsub) {
        case 1: return _mm512_set1_ps(*s);
        case 2: {
            double pair;
            std::memcpy(&pair, s, sizeof(pair));
            return _mm512_castpd_ps(_mm512_set1_pd(pair));
        }
        case 4: return _mm512_broadcast_f32x4(_mm_loadu_ps(s));
        case 8: return _mm512_broadcast_f32x8(_mm256_loadu_ps(s));
        default: return _mm512_loadu_ps(s);
    }
}

}  // namespace

void widen_int8_by16_avx512(const std::int8_t* q, const float* scale, int M, std::size_t per_m, int dsub, float* out) {
    for (int m = 0; m < M; ++m, q += per_m, out += per_m) {
        const __m512 s = scale_pattern(scale + std::size_t(m) * dsub, dsub);
        for (std::size_t i = 0; i < per_m; i += 16) {
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
            _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s));
        }
    }
}

}  // namespace aqpim::kv
