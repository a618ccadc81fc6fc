// AVX2 histogram value path: per token, the weights of up to 8 heads (one masked vector) are added
// into bin hist[m][code][:] of every subspace; 4-bit token-outer, subspace-inner; 8-bit in chunks
// of subspaces (values_hist_8bit.h); the AVX-512 level calls this 8-bit pass too.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"
#include "pq/values_hist_8bit.h"

namespace aqpim {

namespace {

// 8-bit codes, in the chunked order: heads in groups of 8 (a ymm), or 4 (an xmm) for the last
// group when it has at most 4; vmaskmovps only where a group is not full.
struct Full4 {
    __m128 load(const float* w) const { return _mm_load_ps(w); }
    void add(float* bin, __m128 v) const { _mm_storeu_ps(bin, _mm_add_ps(_mm_loadu_ps(bin), v)); }
};
struct Full8 {
    __m256 load(const float* w) const { return _mm256_load_ps(w); }
    void add(float* bin, __m256 v) const { _mm256_storeu_ps(bin, _mm256_add_ps(_mm256_loadu_ps(bin), v)); }
};
struct Masked4 {
    __m128i mask;
    __m128 load(const float* w) const { return _mm_load_ps(w); }
    void add(float* bin, __m128 v) const { _mm_maskstore_ps(bin, mask, _mm_add_ps(_mm_maskload_ps(bin, mask), v)); }
};
struct Masked8 {
    __m256i mask;
    __m256 load(const float* w) const { return _mm256_load_ps(w); }
    void add(float* bin, __m256 v) const {
        _mm256_maskstore_ps(bin, mask, _mm256_add_ps(_mm256_maskload_ps(bin, mask), v));
    }
};

void values_hist_8bit(const float* p, std::int64_t p_stride, int n_q, int M, const std::uint8_t* blocks,
                      std::int64_t n_blocks, float* hist) {
    for (int h0 = 0; h0 < n_q; h0 += 8) {
        const int nh = std::min(8, n_q - h0);
        const __m256i mask8 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nh), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
        if (nh == 4)
            hist_8bit_heads<4>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Full4{});
        else if (nh < 4)
            hist_8bit_heads<4>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Masked4{_mm256_castsi256_si128(mask8)});
        else if (nh == 8)
            hist_8bit_heads<8>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Full8{});
        else
            hist_8bit_heads<8>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Masked8{mask8});
    }
}

}  // namespace

void values_hist_avx2(const float* p, std::int64_t p_stride, int n_q, int M, int nbits, const std::uint8_t* blocks,
                      std::int64_t n_blocks, float* hist) {
    if (nbits == 8) return values_hist_8bit(p, p_stride, n_q, M, blocks, n_blocks, hist);
    const int ksub = 1 << nbits;
    const std::size_t block_bytes = code_block_bytes(M, nbits);
    alignas(32) std::uint8_t codes[kCodeBlock * 1024];  // [M][32] unpacked codes of one block (M <= 1024)
    alignas(32) float pt[kCodeBlock * 8];               // [32][8] weights of up to 8 heads per token
    for (int h0 = 0; h0 < n_q; h0 += 8) {
        const int nq = std::min(8, n_q - h0);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(nq), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
        for (std::int64_t b = 0; b < n_blocks; ++b) {
            const std::uint8_t* block = blocks + b * block_bytes;
            for (int m = 0; m < M; ++m)
                for (int t = 0; t < kCodeBlock; ++t) codes[m * 32 + t] = code_at(block, t, M, nbits, m);
            for (int h = 0; h < nq; ++h)
                for (int t = 0; t < kCodeBlock; ++t) pt[t * 8 + h] = p[(h0 + h) * p_stride + b * 32 + t];
            for (int t = 0; t < kCodeBlock; ++t) {
                const __m256 w = _mm256_maskload_ps(pt + t * 8, mask);
                for (int m = 0; m < M; ++m) {
                    float* bin = hist + (std::int64_t(m) * ksub + codes[m * 32 + t]) * n_q + h0;
                    _mm256_maskstore_ps(bin, mask, _mm256_add_ps(_mm256_maskload_ps(bin, mask), w));
                }
            }
        }
    }
}

}  // namespace aqpim
