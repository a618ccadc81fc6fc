// AVX-512 widening of int8 centroids (kv/pq_compact_centroids.h).

#include <immintrin.h>

#include "kv/pq_compact_centroids.h"

namespace aqpim::kv {

void widen_int8_by16_avx512(const std::int8_t* q, const float* pattern, float* out, std::size_t n) {
    const __m512 s = _mm512_loadu_ps(pattern);
    for (std::size_t i = 0; i < n; i += 16) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s));
    }
}

}  // namespace aqpim::kv
