// AVX-512 int8-table score scan (4-bit codes). One register holds 4 subspaces' 16-entry u8 tables
// (one per 128-bit lane) and the same 4 subspaces' code rows for 32 tokens: vpshufb does 64
// lookups at once. Sums accumulate in u16 (even/odd tokens in separate accumulators), lanes are
// added at the end of the block. Exact integer sums; the only error is the table rounding.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"

namespace aqpim {

namespace {

// 32 u16 (4 lanes x 8 words) -> 8 u16: sum over the lanes.
inline __m128i sum_lanes(__m512i x) {
    const __m256i y = _mm256_add_epi16(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
    return _mm_add_epi16(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
}

// even/odd token sums (8 + 8 words) -> 16 floats in token order.
inline __m512 to_scores(__m128i even, __m128i odd, const Int8LutParams& prm) {
    const __m256i words = _mm256_set_m128i(_mm_unpackhi_epi16(even, odd), _mm_unpacklo_epi16(even, odd));
    const __m512 s = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(words));
    return _mm512_fmadd_ps(s, _mm512_set1_ps(prm.scale), _mm512_set1_ps(prm.bias));
}

template <int NQ>
void scan_heads(const std::uint8_t* qlut, const Int8LutParams* params, int M, const std::uint8_t* blocks,
                std::int64_t n_blocks, float* scores, std::int64_t stride) {
    const __m512i nib = _mm512_set1_epi8(0x0f), low_byte = _mm512_set1_epi16(0x00ff);
    const std::size_t block_bytes = code_block_bytes(M, 4);
    const int n_groups = (M + 3) / 4;
    const int tail = M - (n_groups - 1) * 4;  // subspaces in the last group
    const __mmask64 tail_mask = tail == 4 ? ~__mmask64(0) : (__mmask64(1) << (tail * 16)) - 1;
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        __m512i lo_even[NQ], lo_odd[NQ], hi_even[NQ], hi_odd[NQ];
        for (int h = 0; h < NQ; ++h) lo_even[h] = lo_odd[h] = hi_even[h] = hi_odd[h] = _mm512_setzero_si512();
        for (int g = 0; g < n_groups; ++g) {
            const __mmask64 mask = g + 1 == n_groups ? tail_mask : ~__mmask64(0);
            const __m512i codes = _mm512_maskz_loadu_epi8(mask, block + g * 64);
            const __m512i c_lo = _mm512_and_si512(codes, nib);
            const __m512i c_hi = _mm512_and_si512(_mm512_srli_epi16(codes, 4), nib);
            for (int h = 0; h < NQ; ++h) {
                const __m512i table = _mm512_maskz_loadu_epi8(mask, qlut + (std::int64_t(h) * M + g * 4) * 16);
                const __m512i a = _mm512_shuffle_epi8(table, c_lo), c = _mm512_shuffle_epi8(table, c_hi);
                lo_even[h] = _mm512_add_epi16(lo_even[h], _mm512_and_si512(a, low_byte));
                lo_odd[h] = _mm512_add_epi16(lo_odd[h], _mm512_srli_epi16(a, 8));
                hi_even[h] = _mm512_add_epi16(hi_even[h], _mm512_and_si512(c, low_byte));
                hi_odd[h] = _mm512_add_epi16(hi_odd[h], _mm512_srli_epi16(c, 8));
            }
        }
        for (int h = 0; h < NQ; ++h) {
            float* out = scores + h * stride + b * 32;
            _mm512_storeu_ps(out, to_scores(sum_lanes(lo_even[h]), sum_lanes(lo_odd[h]), params[h]));
            _mm512_storeu_ps(out + 16, to_scores(sum_lanes(hi_even[h]), sum_lanes(hi_odd[h]), params[h]));
        }
    }
}

}  // namespace

void scan_i8_avx512(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M,
                    const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride) {
    for (int h0 = 0; h0 < n_q; h0 += 4) {
        const int nq = std::min(4, n_q - h0);
        const std::uint8_t* ql = qlut + std::int64_t(h0) * M * 16;
        float* s = scores + h0 * score_stride;
        switch (nq) {
            case 1: scan_heads<1>(ql, params + h0, M, blocks, n_blocks, s, score_stride); break;
            case 2: scan_heads<2>(ql, params + h0, M, blocks, n_blocks, s, score_stride); break;
            case 3: scan_heads<3>(ql, params + h0, M, blocks, n_blocks, s, score_stride); break;
            default: scan_heads<4>(ql, params + h0, M, blocks, n_blocks, s, score_stride); break;
        }
    }
}

}  // namespace aqpim
