#pragma once
// The steps of quantize_luts (aqpim/pq_kernels.h) around the per-ISA work on 16 table entries (a
// 4-bit subspace, or a sixteenth of an 8-bit one): every level runs this skeleton with its own two
// row operations, so each gives the scalar definition's bytes (PqKernels.QuantizeLutsIsTheScalarDefinition).

#include <algorithm>
#include <cstdint>

#include "aqpim/pq_kernels.h"
#include "aqpim/workspace.h"

namespace aqpim {

/// min_max(row, n, lo, hi): the least and greatest of row[0..n); quantize_row(row, n, lo, inv, out):
/// out[c] = clamp(nearbyint((row[c] - lo) * inv), 0, 255) for c < n; n = ksub, a multiple of 16.
template <class MinMax, class QuantizeRow>
void quantize_luts_with(const float* lut, int n_q, int M, int ksub, std::uint8_t* qlut, Int8LutParams* params,
                        MinMax min_max, QuantizeRow quantize_row) {
    LocalBuffer<float, 256> minima{std::size_t(M)};  // each subspace's minimum, from the first pass to the second
    float* mins = minima.data();
    for (int h = 0; h < n_q; ++h) {
        const float* l = lut + std::int64_t(h) * M * ksub;
        float bias = 0, max_range = 0;
        for (int m = 0; m < M; ++m) {
            float lo, hi;
            min_max(l + m * ksub, ksub, lo, hi);
            mins[m] = lo;
            bias += lo;
            max_range = std::max(max_range, hi - lo);
        }
        // One grid step for every subspace (so the u8 sums add up on one scale); 255 levels.
        const float scale = max_range > 0 ? max_range / 255.0f : 1.0f, inv = 1.0f / scale;
        for (int m = 0; m < M; ++m)
            quantize_row(l + m * ksub, ksub, mins[m], inv, qlut + (std::int64_t(h) * M + m) * ksub);
        params[h] = {scale, bias};
    }
}

}  // namespace aqpim
