// AVX-512 histogram value path: per token, the softmax weights of all heads (one masked vector)
// are added into bin hist[m][code][:] of every subspace. 4-bit: token-outer, subspace-inner, so
// consecutive read-modify-writes hit different bins (no store-forwarding chains); 8-bit: the AVX2
// pass, in chunks of subspaces (values_hist_8bit.h).

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"

namespace aqpim {

void values_hist_avx512(const float* p, std::int64_t p_stride, int n_q, int M, int nbits, const std::uint8_t* blocks,
                        std::int64_t n_blocks, float* hist) {
    // 8-bit: the AVX2 pass (values_hist_avx2.cpp) serves this level too; it is bound by one bin
    // read-modify-write per token and subspace, not by vector width (a 16-lane pass for 9-16 heads
    // would halve the passes of those rare group sizes only).
    if (nbits == 8) return values_hist_avx2(p, p_stride, n_q, M, 8, blocks, n_blocks, hist);
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
