// AVX-512 int8-table score scan of 8-bit codes (VBMI, part of the avx512 level).
// An 8-bit block holds M rows of 32 bytes, row m the sub-codes m of its 32 tokens, so the rows m of
// two blocks are 64 indices into subspace m's 256-entry u8 table. The table is four registers:
// vpermi2b looks 64 indices up in a 128-byte half (it reads the low 7 bits), once in each half,
// and the indices' top bits pick between the two. The 64 looked-up bytes are widened to u16 by
// unpacking against zero and added per token (M <= 256: at most 256 x 255 per sum). The unpacks
// work within 128-bit lanes, so the sums wait lane-interleaved until one qword permute per 32
// tokens puts them back in token order. Per 64 lookups and head: 4 table loads (from L1), 2
// vpermi2b, 1 blend, 2 unpacks, 2 adds, where the float tables' by4 scan spends a load-and-add per
// token, subspace and four heads (docs/pq-kernels.md "8-bit codes with int8 tables").

#include <immintrin.h>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"

namespace aqpim {

namespace {

/// 16 u16 sums (tokens in order) as scores bias + scale * sum.
inline void store_scores(__m256i sums, __m512 scale, __m512 bias, float* out) {
    _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(sums)), scale, bias));
}

template <int NQ>
void scan_heads(const std::uint8_t* qlut, const Int8LutParams* params, int M, const std::uint8_t* blocks,
                std::int64_t n_blocks, float* scores, std::int64_t stride) {
    const std::size_t block_bytes = code_block_bytes(M, 8);
    const __m512i zero = _mm512_setzero_si512();
    // unpacklo holds, per 128-bit lane l, tokens 16l .. 16l+7 and unpackhi 16l+8 .. 16l+15 (4 per
    // qword): qwords in token order are lo 0 1, hi 0 1, lo 2 3, hi 2 3, ... (hi's qwords are 8-15).
    const __m512i first_half = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i second_half = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (std::int64_t b = 0; b < n_blocks; b += 2) {
        const bool pair = b + 1 < n_blocks;
        const std::uint8_t* b0 = blocks + b * block_bytes;
        prefetch_stream(b0, (pair ? 2 : 1) * block_bytes);
        __m512i lo[NQ], hi[NQ];
        for (int h = 0; h < NQ; ++h) lo[h] = hi[h] = zero;
        for (int m = 0; m < M; ++m) {
            const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + m * kCodeBlock));
            const __m256i c1 = pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + block_bytes + m * kCodeBlock))
                                    : _mm256_setzero_si256();
            const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
            const __mmask64 upper = _mm512_movepi8_mask(idx);  // codes 128-255
            for (int h = 0; h < NQ; ++h) {
                const std::uint8_t* t = qlut + (std::int64_t(h) * M + m) * 256;
                const __m512i low_half = _mm512_permutex2var_epi8(_mm512_loadu_si512(t), idx, _mm512_loadu_si512(t + 64));
                const __m512i high_half =
                    _mm512_permutex2var_epi8(_mm512_loadu_si512(t + 128), idx, _mm512_loadu_si512(t + 192));
                const __m512i r = _mm512_mask_blend_epi8(upper, low_half, high_half);
                lo[h] = _mm512_add_epi16(lo[h], _mm512_unpacklo_epi8(r, zero));
                hi[h] = _mm512_add_epi16(hi[h], _mm512_unpackhi_epi8(r, zero));
            }
        }
        for (int h = 0; h < NQ; ++h) {
            const __m512 scale = _mm512_set1_ps(params[h].scale), bias = _mm512_set1_ps(params[h].bias);
            float* out = scores + h * stride + b * kCodeBlock;
            const __m512i tokens_0_31 = _mm512_permutex2var_epi64(lo[h], first_half, hi[h]);
            store_scores(_mm512_castsi512_si256(tokens_0_31), scale, bias, out);
            store_scores(_mm512_extracti64x4_epi64(tokens_0_31, 1), scale, bias, out + 16);
            if (!pair) continue;
            const __m512i tokens_32_63 = _mm512_permutex2var_epi64(lo[h], second_half, hi[h]);
            store_scores(_mm512_castsi512_si256(tokens_32_63), scale, bias, out + 32);
            store_scores(_mm512_extracti64x4_epi64(tokens_32_63, 1), scale, bias, out + 48);
        }
    }
}

}  // namespace

void scan_i8_8bit_avx512(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M,
                         const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride) {
    for_head_groups<4>(n_q, [&](auto NQ, int h0) {
        scan_heads<NQ()>(qlut + std::int64_t(h0) * M * 256, params + h0, M, blocks, n_blocks,
                         scores + h0 * score_stride, score_stride);
    });
}

}  // namespace aqpim
