#pragma once
// The loop every row-batch product shares (dot_rows_batch, dot_rows_invariant and
// dot_rows_batch_quantized, at every level that has them): Y[c][r] = row r . X[c] for n_rows rows
// and n_x activations (f32 rows of X, x_stride floats apart, or prepared QuantizedX, x_stride 1), in
// blocks of kR rows x kC activations. Per block of activations the values go in chunks of
// kBatchChunk: the block's x and a chunk of every row of the tile stay in L1 while the row blocks
// pass. Between chunks a block's accumulators wait in `saved` (kBlockFloats floats per row block).
// The level's block kernel does the arithmetic; nothing here changes it, so an output's bits do not
// depend on the blocking. Include only from the per-level kernel files.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "model/quant_blocks.h"
#include "simd/static_dispatch.h"

namespace aqpim::quant {

/// block(RR, CC, rows, xs, k0, k1, acc, ys, ahead): the sums of RR rows (compile-time counts) against
/// CC activations over values [k0, k1) of rows of `cols`, acc the block's saved accumulators (null
/// when one chunk covers the row), `ahead` > 0 the distance at which to request each row's weights
/// ahead (the first block of activations reads them from memory; whole row blocks ahead, at least
/// kWeightPrefetchBytes, matvec's distance: 4 KB ahead inside the row measured 0.6x on 8 rows of
/// 8 KB, one thread, a lone activation).
template <int kR, int kC, std::int64_t kBlockFloats, class Act, class Block>
inline void row_batch_blocks(const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows, std::int64_t cols,
                             const Act* X, std::int64_t x_stride, std::int64_t n_x, float* Y, std::int64_t ldy,
                             float* saved, Block&& block) {
    constexpr std::int64_t kKc = kBatchChunk;
    const std::size_t block_bytes = std::size_t(kR) * row_bytes;
    const std::size_t ahead = (kWeightPrefetchBytes + block_bytes - 1) / block_bytes * block_bytes;
    for (std::int64_t c0 = 0; c0 < n_x; c0 += kC) {
        const int nc = int(std::min<std::int64_t>(kC, n_x - c0));
        const Act* xs[kC];
        float* ys[kC];
        for (std::int64_t k0 = 0; k0 < cols; k0 += kKc) {
            const std::int64_t k1 = std::min(cols, k0 + kKc);
            for (std::int64_t r0 = 0; r0 < n_rows; r0 += kR) {
                const int nr = int(std::min<std::int64_t>(kR, n_rows - r0));
                const std::uint8_t* rows[kR];
                for (int r = 0; r < nr; ++r) rows[r] = w + std::size_t(r0 + r) * row_bytes;
                for (int c = 0; c < nc; ++c) xs[c] = X + (c0 + c) * x_stride, ys[c] = Y + (c0 + c) * ldy + r0;
                float* acc = cols > kKc ? saved + (r0 / kR) * kBlockFloats : nullptr;
                with_count<kR>(nr, [&](auto RR) {
                    with_count<kC>(nc, [&](auto CC) { block(RR, CC, rows, xs, k0, k1, acc, ys, c0 == 0 ? ahead : 0); });
                });
            }
        }
    }
}

}  // namespace aqpim::quant
