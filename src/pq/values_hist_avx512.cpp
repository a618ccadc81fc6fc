// AVX-512 histogram value path: per token, the softmax weights of all heads (one masked vector)
// are added into bin hist[m][code][:] of every subspace. 4-bit: token-outer, subspace-inner, so
// consecutive read-modify-writes hit different bins (no store-forwarding chains); 8-bit: in chunks
// of subspaces (values_hist_8bit.h), the 256-bin histograms being too large for L1 all at once.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"
#include "pq/values_hist_8bit.h"

namespace aqpim {

namespace {

// 8-bit codes: one masked vector of 4, 8 or 16 lanes per head group, in the chunked order.
struct Masked4 {
    __mmask8 mask;
    __m128 load(const float* w) const { return _mm_load_ps(w); }
    void add(float* bin, __m128 v) const { _mm_mask_storeu_ps(bin, mask, _mm_add_ps(_mm_maskz_loadu_ps(mask, bin), v)); }
};
struct Masked8 {
    __mmask8 mask;
    __m256 load(const float* w) const { return _mm256_load_ps(w); }
    void add(float* bin, __m256 v) const {
        _mm256_mask_storeu_ps(bin, mask, _mm256_add_ps(_mm256_maskz_loadu_ps(mask, bin), v));
    }
};
struct Masked16 {
    __mmask16 mask;
    __m512 load(const float* w) const { return _mm512_load_ps(w); }
    void add(float* bin, __m512 v) const {
        _mm512_mask_storeu_ps(bin, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, bin), v));
    }
};

void values_hist_8bit(const float* p, std::int64_t p_stride, int n_q, int M, const std::uint8_t* blocks,
                      std::int64_t n_blocks, float* hist) {
    for (int h0 = 0; h0 < n_q; h0 += 16) {
        const int nh = std::min(16, n_q - h0);
        const unsigned mask = (1u << nh) - 1;
        if (nh == 4)
            hist_8bit_heads<4>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Full4{});
        else if (nh == 8)
            hist_8bit_heads<8>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Full8{});
        else if (nh < 4)
            hist_8bit_heads<4>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Masked4{__mmask8(mask)});
        else if (nh < 8)
            hist_8bit_heads<8>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Masked8{__mmask8(mask)});
        else
            hist_8bit_heads<16>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, Masked16{__mmask16(mask)});
    }
}

}  // namespace

void values_hist_avx512(const float* p, std::int64_t p_stride, int n_q, int M, int nbits, const std::uint8_t* blocks,
                        std::int64_t n_blocks, float* hist) {
    if (nbits == 8) return values_hist_8bit(p, p_stride, n_q, M, blocks, n_blocks, hist);
    const int ksub = 1 << nbits;
    const std::size_t block_bytes = code_block_bytes(M, nbits);
    alignas(64) std::uint8_t codes[kCodeBlock * 1024];  // [M][32] unpacked codes of one block (M <= 1024)
    alignas(64) float pt[kCodeBlock * 16];              // [32][16] weights of up to 16 heads per token
    for (int h0 = 0; h0 < n_q; h0 += 16) {
        const int nq = std::min(16, n_q - h0);
        const __mmask16 mask = __mmask16((1u << nq) - 1);
        for (std::int64_t b = 0; b < n_blocks; ++b) {
            const std::uint8_t* block = blocks + b * block_bytes;
            for (int m = 0; m < M; ++m)
                for (int t = 0; t < kCodeBlock; ++t) codes[m * 32 + t] = code_at(block, t, M, nbits, m);
            for (int h = 0; h < nq; ++h)
                for (int t = 0; t < kCodeBlock; ++t) pt[t * 16 + h] = p[(h0 + h) * p_stride + b * 32 + t];
            for (int t = 0; t < kCodeBlock; ++t) {
                const __m512 w = _mm512_maskz_loadu_ps(mask, pt + t * 16);
                for (int m = 0; m < M; ++m) {
                    float* bin = hist + (std::int64_t(m) * ksub + codes[m * 32 + t]) * n_q + h0;
                    _mm512_mask_storeu_ps(bin, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, bin), w));
                }
            }
        }
    }
}

}  // namespace aqpim
