#include <immintrin.h>

#include "core/read_bandwidth.h"

namespace aqpim {

std::uint64_t read_bytes_avx512(const std::uint8_t* p, std::size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes + 128), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes + 192), _MM_HINT_T0);
        a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(p + i + 64));
        a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(p + i + 128));
        a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(p + i + 192));
    }
    const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    std::uint64_t s = std::uint64_t(_mm512_reduce_or_epi64(a));
    for (; i < n; ++i) s ^= p[i];
    return s;
}

}  // namespace aqpim
