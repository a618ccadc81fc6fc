#pragma once
// Shared plumbing of the tiled attention loops (dense and PQ): the scratch they keep in the caller's
// Workspace (no allocation on the decode path once warm) and accumulator rescaling.

#include <cstdint>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/workspace.h"

namespace aqpim {

/// A Workspace part: the tiles, tables and accumulators of one attention call.
struct AttentionScratch {
    AlignedBuffer<float> q;       ///< [n_q][D] scaled (dense) or transformed (PQ) queries
    AlignedBuffer<float> scores;  ///< [n_q][tile] scores, then softmax weights
    std::vector<float> alpha;     ///< [n_q] rescale factors of the current tile
    AlignedBuffer<float> lut;     ///< [n_q][M][ksub]
    AlignedBuffer<std::uint8_t> qlut;  ///< [n_q][M][16]
    AlignedBuffer<float> columns;      ///< [M][dsub][16]
    AlignedBuffer<float> hist;         ///< [M][ksub][n_q]
    AlignedBuffer<float> acc;          ///< [n_q][D] values in quantizer space

    void reserve(int n_q, int D, std::int64_t tile);
    std::size_t bytes() const;
};

/// rows[r][:] *= alpha[r] for r < n_rows (skips alpha == 1).
void rescale_rows(float* rows, int n_rows, std::int64_t row_len, const float* alpha);

}  // namespace aqpim
