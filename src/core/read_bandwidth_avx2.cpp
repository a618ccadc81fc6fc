#include <immintrin.h>

#include "core/read_bandwidth.h"
#include "core/stream_f16_kernel.h"
#include "simd/prefetch.h"

namespace aqpim {

std::uint64_t read_bytes_avx2(const std::uint8_t* p, std::size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        prefetch_stream(p + i, 128);
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

namespace {

struct Avx2Floats {
    using Reg = __m256;
    static constexpr int kLanes = 8;
    static Reg zero() { return _mm256_setzero_ps(); }
    static Reg set1(float v) { return _mm256_set1_ps(v); }
    static Reg load_f16(const std::uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
    static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
    static void store(float* lanes, Reg r) { _mm256_storeu_ps(lanes, r); }
};

}  // namespace

float stream_f16_fmas_avx2(const std::uint8_t* p, std::size_t n, int macs_per_value) {
    return stream_f16_fmas_any<Avx2Floats>(p, n, macs_per_value);
}

}  // namespace aqpim
