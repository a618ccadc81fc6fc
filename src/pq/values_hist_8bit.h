#pragma once
// The order of the 8-bit histogram pass (values_hist at nbits 8, in values_hist_avx2.cpp, which
// the AVX-512 level uses too): subspaces in chunks of 8 across runs of up to 32 blocks, so a
// chunk's bins (8 x 256 x n_q floats: 32 KiB for 4 heads) stay in L1 while every token of the run
// adds into them. Token by token over all subspaces, M = 32 subspaces' bins (128 KiB at 4 heads)
// miss L1 on most adds. The caller supplies the vector ops: `load(w)` of one token's W weights and
// `add(bin, v)` into one bin.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "aqpim/pq_codes.h"

namespace aqpim {

inline constexpr std::int64_t kHist8RunBlocks = 32;
inline constexpr int kHist8Chunk = 8;

/// w[t][j] = p[j][t] for t < n_tokens and j < n_heads; the lanes j in [n_heads, W) zero.
inline void weights_by_token(const float* p, std::int64_t p_stride, int n_heads, std::int64_t n_tokens, int W,
                             float* w) {
    for (std::int64_t t = 0; t < n_tokens; ++t)
        for (int j = 0; j < W; ++j) w[t * W + j] = j < n_heads ? p[j * p_stride + t] : 0.0f;
}

template <int W, int Stride, class Ops>
void hist_8bit_heads_strided(const float* p, std::int64_t p_stride, int n_q, int h0, int M, const std::uint8_t* blocks,
                             std::int64_t n_blocks, float* hist, const Ops& ops) {
    const std::int64_t stride = Stride > 0 ? Stride : n_q;
    const std::size_t block_bytes = code_block_bytes(M, 8);
    alignas(64) float w[kHist8RunBlocks * kCodeBlock * W];
    for (std::int64_t b0 = 0; b0 < n_blocks; b0 += kHist8RunBlocks) {
        const std::int64_t nb = std::min(kHist8RunBlocks, n_blocks - b0);
        weights_by_token(p + h0 * p_stride + b0 * kCodeBlock, p_stride, std::min(W, n_q - h0), nb * kCodeBlock, W, w);
        const std::uint8_t* run = blocks + b0 * block_bytes;
        for (int m0 = 0; m0 < M; m0 += kHist8Chunk) {
            // a full chunk unrolls (a run-time count costs a loop branch per add)
            const auto chunk = [&](auto n_chunk) {
                for (std::int64_t b = 0; b < nb; ++b) {
                    const std::uint8_t* codes = run + b * block_bytes + m0 * kCodeBlock;
                    for (int t = 0; t < kCodeBlock; ++t) {
                        const auto wt = ops.load(w + (b * kCodeBlock + t) * W);  // in a register for the chunk
                        for (int j = 0; j < n_chunk; ++j)
                            ops.add(hist + ((std::int64_t(m0) + j) * 256 + codes[j * kCodeBlock + t]) * stride + h0,
                                    wt);
                    }
                }
            };
            if (M - m0 >= kHist8Chunk)
                chunk(std::integral_constant<int, kHist8Chunk>{});
            else
                chunk(M - m0);
        }
    }
}

/// For the heads [h0, h0 + min(W, n_q - h0)): ops.add(&hist[m][code(t, m)][h0], ops.load(weights of
/// token t, W floats)) for every token t of n_blocks 8-bit blocks and every subspace m. The bins
/// are n_q floats apart: a compile-time W when n_q == W (a shift, not a multiply per add).
template <int W, class Ops>
void hist_8bit_heads(const float* p, std::int64_t p_stride, int n_q, int h0, int M, const std::uint8_t* blocks,
                     std::int64_t n_blocks, float* hist, const Ops& ops) {
    if (n_q == W) return hist_8bit_heads_strided<W, W>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, ops);
    hist_8bit_heads_strided<W, 0>(p, p_stride, n_q, h0, M, blocks, n_blocks, hist, ops);
}

}  // namespace aqpim
