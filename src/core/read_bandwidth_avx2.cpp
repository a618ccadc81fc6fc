#include <immintrin.h>

#include "core/read_bandwidth.h"

namespace aqpim {

std::uint64_t read_bytes_avx2(const std::uint8_t* p, std::size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes + 64), _MM_HINT_T0);
        a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    std::uint64_t s = std::uint64_t(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 1) ^
                                    _mm256_extract_epi64(a, 2) ^ _mm256_extract_epi64(a, 3));
    for (; i < n; ++i) s ^= p[i];
    return s;
}

}  // namespace aqpim
