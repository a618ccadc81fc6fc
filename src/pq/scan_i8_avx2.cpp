// AVX2 int8-table score scan (4-bit codes). A 4-bit group (aqpim/pq_codes.h) is 32 tokens x 4
// subspaces, byte 4i + j = code(i, j) | code(i + 16, j) << 4. Once per group (for every head), a
// byte transpose in each lane, a dword unpack and a cross-lane permute give each subspace j one
// vector of its 32 tokens' codes (lane 0 tokens 0-15, lane 1 tokens 16-31), so one vpshufb looks
// up 32 tokens in a 16-entry table. Per head, two subspaces' u8 results are interleaved and summed
// into u16 per token by vpmaddubsw; a token's u16 sum over all M subspaces is at most 255 M, exact
// for M <= 256, and is widened unsigned at the end of the block. Exact integer sums.
//
// (The first version looked up each subspace with its own vpshufb over the group's bytes as they
// lie, the other subspaces' bytes masked to 0: four vpshufb per 8 tokens x 4 subspaces per head,
// which bound it at 10.2 ns per token for 4 heads at M = 32; docs/pq-kernels.md.)

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"

namespace aqpim {

namespace {

/// The group's 64 bytes -> idx[j] (j < 4): subspace j's codes of tokens 0-15 (lane 0) and 16-31 (lane 1).
inline void group_indices(const std::uint8_t* group, __m256i idx[4]) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    // Per lane, bytes (4i + j) -> (4j + i): the lane's four dwords become subspaces 0-3 of its 4 tokens.
    const __m256i transpose = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9,
                                               13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m256i a = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)), transpose);
    const __m256i b = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32)), transpose);
    // a: tokens 0-3 | 4-7, b: 8-11 | 12-15. unpacklo_epi32 -> [a0.s0 b0.s0 a0.s1 b0.s1 | a1.s0 b1.s0 a1.s1 b1.s1]
    // and vpermd puts subspace s's four dwords in token order: [s0 of 0-15 | s1 of 0-15].
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i v01 = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi32(a, b), order);
    const __m256i v23 = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi32(a, b), order);
    for (int k = 0; k < 2; ++k) {
        const __m256i v = k == 0 ? v01 : v23;
        const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
        idx[2 * k] = _mm256_permute2x128_si256(lo, hi, 0x20);      // subspace 2k: tokens 0-15 | 16-31
        idx[2 * k + 1] = _mm256_permute2x128_si256(lo, hi, 0x31);  // subspace 2k+1
    }
}

template <int NQ>
void scan_heads(const std::uint8_t* qlut, const Int8LutParams* params, int M, const std::uint8_t* blocks,
                std::int64_t n_blocks, float* scores, std::int64_t stride) {
    const __m256i ones8 = _mm256_set1_epi8(1);
    const std::size_t block_bytes = code_block_bytes(M, 4);
    const int n_groups = (M + 3) / 4;
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        prefetch_stream(block, block_bytes);
        // u16 sums per token: lo = tokens 0-7 | 16-23, hi = tokens 8-15 | 24-31 (vpunpck*bw order)
        __m256i acc_lo[NQ], acc_hi[NQ];
        for (int h = 0; h < NQ; ++h) acc_lo[h] = acc_hi[h] = _mm256_setzero_si256();
        for (int g = 0; g < n_groups; ++g) {
            const int n_sub = std::min(4, M - 4 * g);
            __m256i idx[4];
            group_indices(block + g * 64, idx);
            for (int h = 0; h < NQ; ++h) {
                const std::uint8_t* t = qlut + (std::int64_t(h) * M + 4 * g) * 16;
                for (int j = 0; j < n_sub; j += 2) {
                    const __m256i r0 = _mm256_shuffle_epi8(
                        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t + j * 16))), idx[j]);
                    const __m256i r1 =
                        j + 1 < n_sub ? _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(
                                                                reinterpret_cast<const __m128i*>(t + (j + 1) * 16))),
                                                            idx[j + 1])
                                      : _mm256_setzero_si256();
                    acc_lo[h] = _mm256_add_epi16(acc_lo[h], _mm256_maddubs_epi16(_mm256_unpacklo_epi8(r0, r1), ones8));
                    acc_hi[h] = _mm256_add_epi16(acc_hi[h], _mm256_maddubs_epi16(_mm256_unpackhi_epi8(r0, r1), ones8));
                }
            }
        }
        for (int h = 0; h < NQ; ++h) {
            const __m256 scale = _mm256_set1_ps(params[h].scale), bias = _mm256_set1_ps(params[h].bias);
            float* out = scores + h * stride + b * 32;
            const __m128i quarters[4] = {_mm256_castsi256_si128(acc_lo[h]), _mm256_castsi256_si128(acc_hi[h]),
                                         _mm256_extracti128_si256(acc_lo[h], 1), _mm256_extracti128_si256(acc_hi[h], 1)};
            for (int q = 0; q < 4; ++q) {
                const __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(quarters[q]));
                _mm256_storeu_ps(out + q * 8, _mm256_fmadd_ps(s, scale, bias));
            }
        }
    }
}

}  // namespace

void scan_i8_avx2(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M, int nbits,
                  const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride) {
    if (nbits == 8) return scan_i8_ref(qlut, params, n_q, M, 8, blocks, n_blocks, scores, score_stride);
    for_head_groups<4>(n_q, [&](auto NQ, int h0) {
        scan_heads<NQ()>(qlut + std::int64_t(h0) * M * 16, params + h0, M, blocks, n_blocks, scores + h0 * score_stride,
                         score_stride);
    });
}

}  // namespace aqpim
