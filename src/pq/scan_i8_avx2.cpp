// AVX2 int8-table score scan (4-bit codes). A 4-bit group (aqpim/pq_codes.h) is 32 tokens x 4
// subspaces with byte 4i + j holding subspace j. vpshufb looks up one 16-entry table per lane, so
// each subspace j gets its own vpshufb whose index has bit 7 set (output 0) on the other
// subspaces' bytes; the four results occupy disjoint bytes and are OR-ed, then vpmaddubsw adds
// the token's bytes pairwise into u16 sums, and vpmaddwd finishes the per-token sum at the end of
// the block. Exact integer sums.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"

namespace aqpim {

namespace {

template <int NQ>
void scan_heads(const std::uint8_t* qlut, const Int8LutParams* params, int M, const std::uint8_t* blocks,
                std::int64_t n_blocks, float* scores, std::int64_t stride) {
    const __m256i nib = _mm256_set1_epi8(0x0f), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i other[4];  // byte 4i + k: 0x80 unless k == j
    for (int j = 0; j < 4; ++j) {
        std::uint32_t pattern = 0x80808080u & ~(0xffu << (8 * j));
        other[j] = _mm256_set1_epi32(int(pattern));
    }
    const std::size_t block_bytes = code_block_bytes(M, 4);
    const int n_groups = (M + 3) / 4;
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        prefetch_stream(block, block_bytes);
        __m256i acc[NQ][4];  // token quarters 0-7, 8-15, 16-23, 24-31: u16 pair sums
        for (int h = 0; h < NQ; ++h)
            for (int q = 0; q < 4; ++q) acc[h][q] = _mm256_setzero_si256();
        for (int g = 0; g < n_groups; ++g) {
            const int n_sub = std::min(4, M - 4 * g);
            const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + g * 64));
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + g * 64 + 32));
            const __m256i nibbles[4] = {_mm256_and_si256(x0, nib), _mm256_and_si256(x1, nib),
                                        _mm256_and_si256(_mm256_srli_epi16(x0, 4), nib),
                                        _mm256_and_si256(_mm256_srli_epi16(x1, 4), nib)};
            for (int h = 0; h < NQ; ++h) {
                __m256i table[4];
                for (int j = 0; j < n_sub; ++j)
                    table[j] = _mm256_broadcastsi128_si256(
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(qlut + (std::int64_t(h) * M + 4 * g + j) * 16)));
                for (int q = 0; q < 4; ++q) {
                    __m256i sum = _mm256_shuffle_epi8(table[0], _mm256_or_si256(nibbles[q], other[0]));
                    for (int j = 1; j < n_sub; ++j)
                        sum = _mm256_or_si256(sum, _mm256_shuffle_epi8(table[j], _mm256_or_si256(nibbles[q], other[j])));
                    acc[h][q] = _mm256_add_epi16(acc[h][q], _mm256_maddubs_epi16(sum, ones8));
                }
            }
        }
        for (int h = 0; h < NQ; ++h) {
            const __m256 scale = _mm256_set1_ps(params[h].scale), bias = _mm256_set1_ps(params[h].bias);
            float* out = scores + h * stride + b * 32;
            for (int q = 0; q < 4; ++q) {
                const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(acc[h][q], ones16));
                _mm256_storeu_ps(out + q * 8, _mm256_fmadd_ps(s, scale, bias));
            }
        }
    }
}

}  // namespace

void scan_i8_avx2(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M, const std::uint8_t* blocks,
                  std::int64_t n_blocks, float* scores, std::int64_t score_stride) {
    for_head_groups<2>(n_q, [&](auto NQ, int h0) {
        scan_heads<NQ()>(qlut + std::int64_t(h0) * M * 16, params + h0, M, blocks, n_blocks, scores + h0 * score_stride,
                         score_stride);
    });
}

}  // namespace aqpim
