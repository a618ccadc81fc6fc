// AVX-512 turbo / qjl decode kernels: 16 codes per step, looked up in a register (vpermps) holding
// the at most 16 centroids; 16 signs per step as a mask blend.

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kv/turbo_kernels.h"

namespace aqpim::kv {

namespace {

/// The 2 * B bytes at `in` as the low bytes of a 64-bit word, by loads of constant width (a
/// variable-length copy into memory and a wider load back would stall store forwarding).
template <int B>
inline std::uint64_t load_codes16(const std::uint8_t* in) {
    if constexpr (B == 3) {
        std::uint32_t lo;
        std::uint16_t hi;
        std::memcpy(&lo, in, 4);
        std::memcpy(&hi, in + 4, 2);
        return lo | std::uint64_t(hi) << 32;
    } else {
        using Word = std::conditional_t<B == 1, std::uint16_t, std::conditional_t<B == 2, std::uint32_t, std::uint64_t>>;
        Word w;
        std::memcpy(&w, in, sizeof w);
        return w;
    }
}

/// 16 codes of B bits packed in the low 16 * B bits of w, as 32-bit lanes.
template <int B>
inline __m512i codes16(std::uint64_t w) {
    const __m512i shift = _mm512_setr_epi64(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
    const __m512i word = _mm512_set1_epi64(std::int64_t(w)), mask = _mm512_set1_epi64((1ll << B) - 1);
    const __m256i lo = _mm512_cvtepi64_epi32(_mm512_and_si512(_mm512_srlv_epi64(word, shift), mask));
    const __m256i hi = _mm512_cvtepi64_epi32(
        _mm512_and_si512(_mm512_srlv_epi64(word, _mm512_add_epi64(shift, _mm512_set1_epi64(8 * B))), mask));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

template <int B>
void centroids(const std::uint8_t* codes, int n, const float* c, float scale, float* out) {
    alignas(64) float t[16] = {};
    std::memcpy(t, c, sizeof(float) << B);
    const __m512 table = _mm512_load_ps(t), s = _mm512_set1_ps(scale);
    int j = 0;
    for (; j + 16 <= n; j += 16, codes += 2 * B)
        _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_permutexvar_ps(codes16<B>(load_codes16<B>(codes)), table), s));
    if (j < n) {  // the last codes from their bytes alone
        std::uint64_t w = 0;
        std::memcpy(&w, codes, std::size_t(((n - j) * B + 7) / 8));
        const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(codes16<B>(w), table), s);
        _mm512_mask_storeu_ps(out + j, __mmask16((1u << (n - j)) - 1), v);
    }
}

}  // namespace

void turbo_centroids_avx512(const std::uint8_t* codes, int n, int bits, const float* c, float scale, float* out) {
    if (!with_vector_bits(bits, [&](auto B) { centroids<B()>(codes, n, c, scale, out); }))
        turbo_centroids_ref(codes, n, bits, c, scale, out);
}

void turbo_signs_avx512(const std::uint8_t* bits, int m, float v, float* out) {
    const __m512 pos = _mm512_set1_ps(v), neg = _mm512_set1_ps(-v);
    int i = 0;
    for (; i + 16 <= m; i += 16, bits += 2) {
        std::uint16_t k;
        std::memcpy(&k, bits, 2);
        _mm512_storeu_ps(out + i, _mm512_mask_blend_ps(__mmask16(k), neg, pos));
    }
    if (i < m) {
        std::uint16_t k = 0;
        std::memcpy(&k, bits, std::size_t((m - i + 7) / 8));
        _mm512_mask_storeu_ps(out + i, __mmask16((1u << (m - i)) - 1), _mm512_mask_blend_ps(__mmask16(k), neg, pos));
    }
}

}  // namespace aqpim::kv
