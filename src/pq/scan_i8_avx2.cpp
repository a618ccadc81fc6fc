// AVX2 int8-table score scan (4-bit codes): one register holds 2 subspaces' u8 tables (one per
// 128-bit lane) and their code rows for 32 tokens; vpshufb does 32 lookups. u16 sums, even and
// odd tokens apart, lanes added at the end of the block.

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"

namespace aqpim {

namespace {

inline __m128i sum_lanes(__m256i x) { return _mm_add_epi16(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)); }

inline void store_scores(__m128i even, __m128i odd, const Int8LutParams& prm, float* out) {
    const __m128i t0_7 = _mm_unpacklo_epi16(even, odd), t8_15 = _mm_unpackhi_epi16(even, odd);
    const __m256 scale = _mm256_set1_ps(prm.scale), bias = _mm256_set1_ps(prm.bias);
    _mm256_storeu_ps(out, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(t0_7)), scale, bias));
    _mm256_storeu_ps(out + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(t8_15)), scale, bias));
}

template <int NQ>
void scan_heads(const std::uint8_t* qlut, const Int8LutParams* params, int M, const std::uint8_t* blocks,
                std::int64_t n_blocks, float* scores, std::int64_t stride) {
    const __m256i nib = _mm256_set1_epi8(0x0f), low_byte = _mm256_set1_epi16(0x00ff);
    const std::size_t block_bytes = code_block_bytes(M, 4);
    const int n_pairs = M / 2;
    // An odd last subspace is scanned from a zero-padded copy (table and codes of a missing
    // subspace are zero, so it adds nothing).
    alignas(32) std::uint8_t odd_tables[NQ][32] = {};
    alignas(32) std::uint8_t odd_codes[32] = {};
    if (M % 2)
        for (int h = 0; h < NQ; ++h) std::memcpy(odd_tables[h], qlut + (std::int64_t(h) * M + M - 1) * 16, 16);
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        __m256i lo_even[NQ], lo_odd[NQ], hi_even[NQ], hi_odd[NQ];
        for (int h = 0; h < NQ; ++h) lo_even[h] = lo_odd[h] = hi_even[h] = hi_odd[h] = _mm256_setzero_si256();
        if (M % 2) std::memcpy(odd_codes, block + (M - 1) * 16, 16);
        for (int g = 0; g < n_pairs + M % 2; ++g) {
            const bool odd = g == n_pairs;
            const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd ? odd_codes : block + g * 32));
            const __m256i c_lo = _mm256_and_si256(codes, nib);
            const __m256i c_hi = _mm256_and_si256(_mm256_srli_epi16(codes, 4), nib);
            for (int h = 0; h < NQ; ++h) {
                const std::uint8_t* tp = odd ? odd_tables[h] : qlut + (std::int64_t(h) * M + g * 2) * 16;
                const __m256i table = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tp));
                const __m256i a = _mm256_shuffle_epi8(table, c_lo), c = _mm256_shuffle_epi8(table, c_hi);
                lo_even[h] = _mm256_add_epi16(lo_even[h], _mm256_and_si256(a, low_byte));
                lo_odd[h] = _mm256_add_epi16(lo_odd[h], _mm256_srli_epi16(a, 8));
                hi_even[h] = _mm256_add_epi16(hi_even[h], _mm256_and_si256(c, low_byte));
                hi_odd[h] = _mm256_add_epi16(hi_odd[h], _mm256_srli_epi16(c, 8));
            }
        }
        for (int h = 0; h < NQ; ++h) {
            float* out = scores + h * stride + b * 32;
            store_scores(sum_lanes(lo_even[h]), sum_lanes(lo_odd[h]), params[h], out);
            store_scores(sum_lanes(hi_even[h]), sum_lanes(hi_odd[h]), params[h], out + 16);
        }
    }
}

}  // namespace

void scan_i8_avx2(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M, const std::uint8_t* blocks,
                  std::int64_t n_blocks, float* scores, std::int64_t score_stride) {
    for (int h0 = 0; h0 < n_q; h0 += 2) {
        const std::uint8_t* ql = qlut + std::int64_t(h0) * M * 16;
        float* s = scores + h0 * score_stride;
        if (n_q - h0 == 1)
            scan_heads<1>(ql, params + h0, M, blocks, n_blocks, s, score_stride);
        else
            scan_heads<2>(ql, params + h0, M, blocks, n_blocks, s, score_stride);
    }
}

}  // namespace aqpim
