// Dispatch of the LUT kernels, and the small level-independent helpers.

#include <algorithm>
#include <cmath>

#include "pq/pq_kernels_isa.h"

namespace aqpim {

namespace {
#define AQPIM_PQ_TABLE(isa) {build_lut_##isa, scan_f32_##isa, scan_i8_##isa, values_hist_##isa, values_perm_##isa}
const PqKernels kTables[3] = {AQPIM_PQ_TABLE(ref), AQPIM_PQ_TABLE(avx2), AQPIM_PQ_TABLE(avx512)};
#undef AQPIM_PQ_TABLE
}  // namespace

const PqKernels& pq_kernels(SimdLevel level) { return kTables[static_cast<int>(level)]; }
const PqKernels& pq_kernels() { return dispatch(kTables); }

void quantize_luts(const float* lut, int n_q, int M, std::uint8_t* qlut, Int8LutParams* params) {
    for (int h = 0; h < n_q; ++h) {
        const float* l = lut + std::int64_t(h) * M * 16;
        float bias = 0, max_range = 0;
        for (int m = 0; m < M; ++m) {
            auto [lo, hi] = std::minmax_element(l + m * 16, l + m * 16 + 16);
            bias += *lo;
            max_range = std::max(max_range, *hi - *lo);
        }
        // One grid step for every subspace (so the u8 sums add up on one scale); 255 levels.
        const float scale = max_range > 0 ? max_range / 255.0f : 1.0f;
        const float inv = 1.0f / scale;
        for (int m = 0; m < M; ++m) {
            const float lo = *std::min_element(l + m * 16, l + m * 16 + 16);
            for (int c = 0; c < 16; ++c) {
                float v = std::nearbyint((l[m * 16 + c] - lo) * inv);
                qlut[(std::int64_t(h) * M + m) * 16 + c] = std::uint8_t(std::clamp(v, 0.0f, 255.0f));
            }
        }
        params[h] = {scale, bias};
    }
}

void codebook_columns(const float* centroids, int M, int dsub, float* columns) {
    for (int m = 0; m < M; ++m)
        for (int c = 0; c < 16; ++c)
            for (int d = 0; d < dsub; ++d)
                columns[(std::int64_t(m) * dsub + d) * 16 + c] = centroids[(std::int64_t(m) * 16 + c) * dsub + d];
}

void hist_times_codebook(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out) {
    const int D = M * dsub;
    for (int m = 0; m < M; ++m)
        for (int c = 0; c < ksub; ++c) {
            const float* cw = centroids + (std::int64_t(m) * ksub + c) * dsub;
            const float* bin = hist + (std::int64_t(m) * ksub + c) * n_q;
            for (int h = 0; h < n_q; ++h) {
                const float w = bin[h];
                if (w == 0) continue;
                float* o = out + std::int64_t(h) * D + m * dsub;
                for (int d = 0; d < dsub; ++d) o[d] += w * cw[d];
            }
        }
}

}  // namespace aqpim
