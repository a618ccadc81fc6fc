#include <immintrin.h>

#include "core/read_bandwidth.h"
#include "core/stream_f16_kernel.h"
#include "simd/prefetch.h"

namespace aqpim {

std::uint64_t read_bytes_avx512(const std::uint8_t* p, std::size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        prefetch_stream(p + i, 256);
        a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(p + i + 64));
        a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(p + i + 128));
        a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(p + i + 192));
    }
    const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    alignas(64) std::uint64_t lanes[8];
    _mm512_store_si512(lanes, a);
    std::uint64_t s = 0;
    for (std::uint64_t v : lanes) s ^= v;
    for (; i < n; ++i) s ^= p[i];
    return s;
}

namespace {

struct Avx512Floats {
    using Reg = __m512;
    static constexpr int kLanes = 16;
    static Reg zero() { return _mm512_setzero_ps(); }
    static Reg set1(float v) { return _mm512_set1_ps(v); }
    static Reg load_f16(const std::uint8_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
    static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
    static void store(float* lanes, Reg r) { _mm512_storeu_ps(lanes, r); }
};

}  // namespace

float stream_f16_fmas_avx512(const std::uint8_t* p, std::size_t n, int macs_per_value) {
    return stream_f16_fmas_any<Avx512Floats>(p, n, macs_per_value);
}

}  // namespace aqpim
