// AVX2 widening of int8 centroids (kv/pq_compact_centroids.h).

#include <immintrin.h>

#include "kv/pq_compact_centroids.h"

namespace aqpim::kv {

void widen_int8_by16_avx2(const std::int8_t* q, const float* pattern, float* out, std::size_t n) {
    const __m256 lo = _mm256_loadu_ps(pattern), hi = _mm256_loadu_ps(pattern + 8);
    for (std::size_t i = 0; i < n; i += 16) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), lo));
        _mm256_storeu_ps(out + i + 8,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b))), hi));
    }
}

}  // namespace aqpim::kv
