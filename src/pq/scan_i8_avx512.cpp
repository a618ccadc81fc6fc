// AVX-512 int8-table score scan of 4-bit codes (needs VBMI and VNNI, part of the avx512 level);
// 8-bit codes go to scan_i8_8bit_avx512.cpp.
// A 4-bit group is 64 bytes = 32 tokens x 4 subspaces, byte 4i + j holding subspace j of tokens i
// (low nibble) and i+16 (high nibble). One register holds the group's four 16-entry u8 tables
// (subspace j at bytes 16j..16j+15), so with index = nibble | j << 4 one vpermb does 64 lookups,
// and the four lookups of a token are adjacent bytes: vpdpbusd against ones adds them into the
// token's 32-bit sum. Exact integer sums; the only error is the table rounding.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"

namespace aqpim {

namespace {

// G > 0: the block has exactly G full groups (M = 4G), known at compile time, so the group loop
// unrolls and, when NQ x G tables fit in 16 registers, the tables stay in registers across blocks
// (measured 1.8x faster at M = 32). G == 0: any M, last group masked.
template <int NQ, int G>
void scan_heads(const std::uint8_t* qlut, const Int8LutParams* params, int M, const std::uint8_t* blocks,
                std::int64_t n_blocks, float* scores, std::int64_t stride) {
    const __m512i nib = _mm512_set1_epi8(0x0f), ones = _mm512_set1_epi8(1);
    const __m512i subspace = _mm512_set1_epi32(0x30201000);  // byte 4i + j -> j << 4
    const std::size_t block_bytes = code_block_bytes(M, 4);
    const int n_groups = G > 0 ? G : (M + 3) / 4;
    const int tail = M - (n_groups - 1) * 4;  // subspaces in the last group
    const __mmask64 tail_mask = tail == 4 ? ~__mmask64(0) : (__mmask64(1) << (tail * 16)) - 1;
    constexpr bool kHoist = G > 0 && NQ * G <= 16;
    __m512i hoisted[kHoist ? NQ * G : 1];
    if constexpr (kHoist)
        for (int h = 0; h < NQ; ++h)
            for (int g = 0; g < G; ++g) hoisted[h * G + g] = _mm512_loadu_si512(qlut + (std::int64_t(h) * M + g * 4) * 16);
    auto table = [&](int h, int g) {
        if constexpr (kHoist) return hoisted[h * G + g];
        if constexpr (G > 0) return _mm512_loadu_si512(qlut + (std::int64_t(h) * M + g * 4) * 16);
        const __mmask64 mask = g + 1 == n_groups ? tail_mask : ~__mmask64(0);
        return _mm512_maskz_loadu_epi8(mask, qlut + (std::int64_t(h) * M + g * 4) * 16);
    };
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        prefetch_stream(block, block_bytes);
        __m512i lo[NQ], hi[NQ];
        for (int h = 0; h < NQ; ++h) lo[h] = hi[h] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int g = 0; g < n_groups; ++g) {
            const __m512i d = _mm512_loadu_si512(block + g * 64);
            // (d & 0x0f) | subspace and ((d >> 4) & 0x0f) | subspace, one ternary-logic op each
            const __m512i i_lo = _mm512_ternarylogic_epi32(d, nib, subspace, 0xEA);
            const __m512i i_hi = _mm512_ternarylogic_epi32(_mm512_srli_epi32(d, 4), nib, subspace, 0xEA);
            for (int h = 0; h < NQ; ++h) {
                const __m512i t = table(h, g);
                lo[h] = _mm512_dpbusd_epi32(lo[h], _mm512_permutexvar_epi8(i_lo, t), ones);
                hi[h] = _mm512_dpbusd_epi32(hi[h], _mm512_permutexvar_epi8(i_hi, t), ones);
            }
        }
        for (int h = 0; h < NQ; ++h) {
            const __m512 scale = _mm512_set1_ps(params[h].scale), bias = _mm512_set1_ps(params[h].bias);
            float* out = scores + h * stride + b * 32;
            _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[h]), scale, bias));
            _mm512_storeu_ps(out + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[h]), scale, bias));
        }
    }
}

}  // namespace

void scan_i8_avx512(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M, int nbits,
                    const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride) {
    if (nbits == 8) return scan_i8_8bit_avx512(qlut, params, n_q, M, blocks, n_blocks, scores, score_stride);
    const int full_groups = M % 4 == 0 ? M / 4 : 0;  // 0: the generic, masked path
    for_head_groups<4>(n_q, [&](auto NQ, int h0) {
        with_constant<4, 8, 16>(full_groups, [&](auto G) {
            scan_heads<NQ(), G()>(qlut + std::int64_t(h0) * M * 16, params + h0, M, blocks, n_blocks,
                                  scores + h0 * score_stride, score_stride);
        });
    });
}

}  // namespace aqpim
