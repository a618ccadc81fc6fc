#pragma once
// hist_times_codebook (aqpim/pq_kernels.h) for one level: every x86 level compiles this template
// with its own vector width (pq_kernels.cpp for the baseline and ref levels, pq_kernels_avx2.cpp,
// pq_kernels_avx512.cpp), the same loop and order of the adds at each; the avx512 level takes its
// packed rows instead where all heads' bins of 16 / dsub codes fit one register (dsub 4 or 8, GQA
// up to 4 or 8: pq_kernels_avx512.cpp).
//
// A centroid row of DS dims is one GCC vector (the compiler otherwise vectorizes over the codes
// with shuffles, 3x slower). Each subspace's rows are read once for a group of up to four heads,
// each head with two add chains (codes even and odd): with 8-bit codes a subspace's 256 rows are
// 8 KiB at dsub 8, and reading them once per head (as this did before 2026-12-05) was 21 us of a
// GQA-4 call at M = 16, more than the 8-bit key scan of 8K tokens.

#include <cstdint>
#include <cstring>

#include "simd/static_dispatch.h"

namespace aqpim::hist_codebook {

typedef float Row2 __attribute__((vector_size(2 * sizeof(float))));
typedef float Row4 __attribute__((vector_size(4 * sizeof(float))));
typedef float Row8 __attribute__((vector_size(8 * sizeof(float))));

template <class Row, int NQ>
void heads_rows(const float* hist, int n_q, int h0, int M, int ksub, const float* centroids, float* out) {
    constexpr int DS = sizeof(Row) / sizeof(float);
    const int D = M * DS;
    const auto row = [](const float* p) {
        Row r;
        std::memcpy(&r, p, sizeof(Row));
        return r;
    };
    for (int m = 0; m < M; ++m) {
        const float* bins = hist + std::int64_t(m) * ksub * n_q + h0;
        const float* rows = centroids + std::int64_t(m) * ksub * DS;
        Row even[NQ] = {}, odd[NQ] = {};
        int c = 0;
        for (; c + 2 <= ksub; c += 2) {
            const Row r0 = row(rows + c * DS), r1 = row(rows + (c + 1) * DS);
            for (int h = 0; h < NQ; ++h) {
                even[h] += bins[std::int64_t(c) * n_q + h] * r0;
                odd[h] += bins[std::int64_t(c + 1) * n_q + h] * r1;
            }
        }
        if (c < ksub)
            for (int h = 0; h < NQ; ++h) even[h] += bins[std::int64_t(c) * n_q + h] * row(rows + c * DS);
        for (int h = 0; h < NQ; ++h) {
            const Row sum = even[h] + odd[h];
            float* o = out + std::int64_t(h0 + h) * D + m * DS;
            for (int d = 0; d < DS; ++d) o[d] += sum[d];
        }
    }
}

/// out[h][m*dsub + d] += Σ_c hist[m][c][h] * centroids[m][c][d]; false where dsub is not 2, 4 or 8.
inline bool rows(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out) {
    const auto run = [&](auto row_type) {
        using Row = decltype(row_type);
        for_head_groups<4>(n_q, [&](auto NQ, int h0) { heads_rows<Row, NQ()>(hist, n_q, h0, M, ksub, centroids, out); });
        return true;
    };
    if (dsub == 2) return run(Row2{});
    if (dsub == 4) return run(Row4{});
    if (dsub == 8) return run(Row8{});
    return false;
}

}  // namespace aqpim::hist_codebook
