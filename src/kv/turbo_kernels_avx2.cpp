// AVX2 turbo / qjl decode kernels: 8 codes per step, looked up in two registers of 8 centroids
// (vpermps each, blended on the code's top bit); 8 signs per step from one byte.

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kv/turbo_kernels.h"

namespace aqpim::kv {

namespace {

/// 8 codes of B bits packed in the low 8 * B bits of w, as 32-bit lanes.
template <int B>
inline __m256i codes8(std::uint32_t w) {
    const __m256i shift = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w)), shift), _mm256_set1_epi32((1 << B) - 1));
}

/// The B bytes at `in` by loads of constant width (see the AVX-512 file on store forwarding).
template <int B>
inline std::uint32_t load_codes8(const std::uint8_t* in) {
    if constexpr (B == 3) {
        std::uint16_t lo;
        std::memcpy(&lo, in, 2);
        return lo | std::uint32_t(in[2]) << 16;
    } else {
        using Word = std::conditional_t<B == 1, std::uint8_t, std::conditional_t<B == 2, std::uint16_t, std::uint32_t>>;
        Word w;
        std::memcpy(&w, in, sizeof w);
        return w;
    }
}

inline __m256 lookup16(__m256i idx, __m256 lo, __m256 hi) {
    const __m256 high = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx), high);
}

template <int B>
void centroids(const std::uint8_t* codes, int n, const float* c, float scale, float* out) {
    alignas(32) float t[16] = {};
    std::memcpy(t, c, sizeof(float) << B);
    const __m256 lo = _mm256_load_ps(t), hi = _mm256_load_ps(t + 8), s = _mm256_set1_ps(scale);
    int j = 0;
    for (; j + 8 <= n; j += 8, codes += B)
        _mm256_storeu_ps(out + j, _mm256_mul_ps(lookup16(codes8<B>(load_codes8<B>(codes)), lo, hi), s));
    if (j < n) {
        std::uint32_t w = 0;
        std::memcpy(&w, codes, std::size_t(((n - j) * B + 7) / 8));
        alignas(32) float v[8];
        _mm256_store_ps(v, _mm256_mul_ps(lookup16(codes8<B>(w), lo, hi), s));
        std::memcpy(out + j, v, sizeof(float) * std::size_t(n - j));
    }
}

}  // namespace

void turbo_centroids_avx2(const std::uint8_t* codes, int n, int bits, const float* c, float scale, float* out) {
    if (!with_vector_bits(bits, [&](auto B) { centroids<B()>(codes, n, c, scale, out); }))
        turbo_centroids_ref(codes, n, bits, c, scale, out);
}

void turbo_signs_avx2(const std::uint8_t* bits, int m, float v, float* out) {
    const __m256 pos = _mm256_set1_ps(v), neg = _mm256_set1_ps(-v);
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    auto expand = [&](std::uint8_t byte) {
        const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(byte), lane_bit), lane_bit);
        return _mm256_blendv_ps(neg, pos, _mm256_castsi256_ps(set));
    };
    int i = 0;
    for (; i + 8 <= m; i += 8, ++bits) _mm256_storeu_ps(out + i, expand(*bits));
    if (i < m) {
        alignas(32) float tail[8];
        _mm256_store_ps(tail, expand(*bits));
        std::memcpy(out + i, tail, sizeof(float) * std::size_t(m - i));
    }
}

}  // namespace aqpim::kv
