// AVX2 widening of int8 centroids (kv/pq_compact_centroids.h).

#include <immintrin.h>

#include "kv/pq_compact_centroids.h"

namespace aqpim::kv {

void widen_int8_by16_avx2(const std::int8_t* q, const float* scale, int M, std::size_t per_m, int dsub, float* out) {
    for (int m = 0; m < M; ++m, q += per_m, out += per_m) {
        const float* s = scale + std::size_t(m) * dsub;
        alignas(32) float pattern[16];
        for (int l = 0; l < 16; l += dsub)
            for (int j = 0; j < dsub; ++j) pattern[l + j] = s[j];
        const __m256 lo = _mm256_load_ps(pattern), hi = _mm256_load_ps(pattern + 8);
        for (std::size_t i = 0; i < per_m; i += 16) {
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
            _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), lo));
            _mm256_storeu_ps(out + i + 8,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b))), hi));
        }
    }
}

}  // namespace aqpim::kv
