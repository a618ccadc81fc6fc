// Scalar specification of the LUT kernels.

#include <algorithm>
#include <cmath>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"

namespace aqpim {

void build_lut_ref(const float* qy, int n_q, int M, int ksub, int dsub, const float* centroids, float* lut, float*) {
    const int D = M * dsub;
    for (int h = 0; h < n_q; ++h)
        for (int m = 0; m < M; ++m)
            for (int c = 0; c < ksub; ++c) {
                const float* cw = centroids + (std::int64_t(m) * ksub + c) * dsub;
                const float* q = qy + std::int64_t(h) * D + m * dsub;
                float s = 0;
                for (int d = 0; d < dsub; ++d) s += q[d] * cw[d];
                lut[(std::int64_t(h) * M + m) * ksub + c] = s;
            }
}

void scan_f32_ref(const float* lut, int n_q, int M, int nbits, const std::uint8_t* blocks, std::int64_t n_blocks,
                  float* scores, std::int64_t score_stride) {
    const int ksub = 1 << nbits;
    const std::int64_t n = n_blocks * kCodeBlock;
    for (int h = 0; h < n_q; ++h)
        for (std::int64_t t = 0; t < n; ++t) {
            float s = 0;
            for (int m = 0; m < M; ++m) s += lut[(std::int64_t(h) * M + m) * ksub + code_at(blocks, t, M, nbits, m)];
            scores[h * score_stride + t] = s;
        }
}

void scan_f32_8bit_by4_ref(const float* lut4, int n_q, int M, const std::uint8_t* blocks, std::int64_t n_blocks,
                           float* scores, std::int64_t score_stride) {
    const std::int64_t n = n_blocks * kCodeBlock;
    for (int h = 0; h < n_q; ++h) {
        const float* group = lut4 + std::int64_t(h / 4) * M * 256 * 4;
        for (std::int64_t t = 0; t < n; ++t) {
            float s = 0;
            for (int m = 0; m < M; ++m) s += group[(std::int64_t(m) * 256 + code_at(blocks, t, M, 8, m)) * 4 + h % 4];
            scores[h * score_stride + t] = s;
        }
    }
}

void scan_i8_ref(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M, int nbits,
                 const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride) {
    const int ksub = 1 << nbits;
    const std::int64_t n = n_blocks * kCodeBlock;
    for (int h = 0; h < n_q; ++h)
        for (std::int64_t t = 0; t < n; ++t) {
            std::int32_t s = 0;
            for (int m = 0; m < M; ++m) s += qlut[(std::int64_t(h) * M + m) * ksub + code_at(blocks, t, M, nbits, m)];
            scores[h * score_stride + t] = params[h].bias + params[h].scale * float(s);
        }
}

void values_hist_ref(const float* p, std::int64_t p_stride, int n_q, int M, int nbits, const std::uint8_t* blocks,
                     std::int64_t n_blocks, float* hist) {
    const int ksub = 1 << nbits;
    const std::int64_t n = n_blocks * kCodeBlock;
    for (std::int64_t t = 0; t < n; ++t)
        for (int m = 0; m < M; ++m) {
            float* bin = hist + (std::int64_t(m) * ksub + code_at(blocks, t, M, nbits, m)) * n_q;
            for (int h = 0; h < n_q; ++h) bin[h] += p[h * p_stride + t];
        }
}

void values_pairs_ref(const float* p, std::int64_t p_stride, int n_q, int M, const std::uint8_t* blocks,
                      std::int64_t n_blocks, float* pair_hist) {
    const int n_pairs = 2 * ((M + 3) / 4);
    const std::int64_t n = n_blocks * kCodeBlock;
    for (std::int64_t t = 0; t < n; ++t)
        for (int pr = 0; pr < n_pairs; ++pr) {
            // subspaces past M are the layout's zero padding
            const int c0 = 2 * pr < M ? code_at(blocks, t, M, 4, 2 * pr) : 0;
            const int c1 = 2 * pr + 1 < M ? code_at(blocks, t, M, 4, 2 * pr + 1) : 0;
            for (int h = 0; h < n_q; ++h)
                pair_hist[((std::int64_t(h / 4) * n_pairs + pr) * 256 + (c0 | c1 << 4)) * 4 + h % 4] +=
                    p[h * p_stride + t];
        }
}

void values_perm_ref(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                     std::int64_t n_blocks, const float* columns, float* out) {
    const int D = M * dsub;
    const std::int64_t n = n_blocks * kCodeBlock;
    for (std::int64_t t = 0; t < n; ++t)
        for (int m = 0; m < M; ++m) {
            const int c = code_at(blocks, t, M, 4, m);
            for (int h = 0; h < n_q; ++h) {
                const float w = p[h * p_stride + t];
                for (int d = 0; d < dsub; ++d)
                    out[std::int64_t(h) * D + m * dsub + d] += w * columns[(std::int64_t(m) * dsub + d) * 16 + c];
            }
        }
}

}  // namespace aqpim
