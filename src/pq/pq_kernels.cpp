// Dispatch of the LUT kernels, and the small level-independent helpers.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <smmintrin.h>

#include "aqpim/error.h"
#include "aqpim/simd.h"
#include "pq/pq_kernels_isa.h"
#include "pq/hist_times_codebook.h"
#include "pq/quantize_luts.h"
#include "simd/sse_util.h"

namespace aqpim {

namespace {
#define AQPIM_PQ_TABLE(isa, pairs, bf16) \
    {build_lut_##isa, scan_f32_##isa, scan_f32_8bit_by4_##isa, scan_i8_##isa, values_hist_##isa, values_perm_##isa, pairs, bf16}
const PqKernels kTables[3] = {AQPIM_PQ_TABLE(ref, values_pairs_ref, nullptr),
                              AQPIM_PQ_TABLE(avx2, values_pairs_avx2, nullptr),
                              AQPIM_PQ_TABLE(avx512, values_pairs_avx2, values_bf16_avx512)};
#undef AQPIM_PQ_TABLE
}  // namespace

const PqKernels& pq_kernels(SimdLevel level) { return kTables[static_cast<int>(level)]; }
const PqKernels& pq_kernels() { return dispatch(kTables); }
bool int8_scores_8bit_fast() { return active_simd_level() == SimdLevel::avx512; }

std::size_t pair_hist_floats(int n_q, int M) { return std::size_t((n_q + 3) / 4) * 2 * ((M + 3) / 4) * 256 * 4; }

void pair_hist_marginals(const float* pair_hist, int n_q, int M, float* hist) {
    // Byte code = c0 | c1 << 4: the 16 rows of one c1 are contiguous (their sum is m1's bin c1);
    // m0's bin c0 sums row c0 of every c1. Four heads per SSE register.
    const int n_pairs = 2 * ((M + 3) / 4);
    for (int hg = 0; hg < (n_q + 3) / 4; ++hg) {
        const int nh = std::min(4, n_q - 4 * hg);
        for (int pr = 0; pr < n_pairs && 2 * pr < M; ++pr) {
            const int m0 = 2 * pr, m1 = 2 * pr + 1;  // m1 == M: the padding subspace of an odd M
            const float* ph = pair_hist + (std::int64_t(hg) * n_pairs + pr) * 256 * 4;
            __m128 by_c0[16], by_c1[16];
            for (int c = 0; c < 16; ++c) by_c0[c] = by_c1[c] = _mm_setzero_ps();
            for (int c1 = 0; c1 < 16; ++c1)
                for (int c0 = 0; c0 < 16; ++c0) {
                    const __m128 v = _mm_loadu_ps(ph + (c1 * 16 + c0) * 4);
                    by_c0[c0] = _mm_add_ps(by_c0[c0], v);
                    by_c1[c1] = _mm_add_ps(by_c1[c1], v);
                }
            const auto add_bins = [&](int m, const __m128* sums) {
                for (int c = 0; c < 16; ++c) {
                    alignas(16) float lanes[4];
                    _mm_store_ps(lanes, sums[c]);
                    float* bin = hist + (std::int64_t(m) * 16 + c) * n_q + 4 * hg;
                    for (int j = 0; j < nh; ++j) bin[j] += lanes[j];
                }
            };
            add_bins(m0, by_c0);
            if (m1 < M) add_bins(m1, by_c1);
        }
    }
}

void interleave_luts_by4(const float* lut, int n_q, int M, float* lut4) {
    // 4 x 4 transposes (SSE, in the x86-64-v2 baseline): four heads' entries of four codes at a time.
    const float zeros[4] = {};
    for (int g = 0; g < (n_q + 3) / 4; ++g)
        for (int m = 0; m < M; ++m) {
            const float* rows[4];
            std::size_t step[4];  // 4 along a head's table, 0 on the zeros of a missing head
            for (int j = 0; j < 4; ++j) {
                const int h = 4 * g + j;
                rows[j] = h < n_q ? lut + (std::int64_t(h) * M + m) * 256 : zeros;
                step[j] = h < n_q ? 4 : 0;
            }
            float* out = lut4 + (std::int64_t(g) * M + m) * 256 * 4;
            for (int c = 0; c < 256; c += 4) {
                __m128 r0 = _mm_loadu_ps(rows[0] + step[0] * (c / 4)), r1 = _mm_loadu_ps(rows[1] + step[1] * (c / 4));
                __m128 r2 = _mm_loadu_ps(rows[2] + step[2] * (c / 4)), r3 = _mm_loadu_ps(rows[3] + step[3] * (c / 4));
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                _mm_storeu_ps(out + 4 * c, r0);
                _mm_storeu_ps(out + 4 * c + 4, r1);
                _mm_storeu_ps(out + 4 * c + 8, r2);
                _mm_storeu_ps(out + 4 * c + 12, r3);
            }
        }
}

void quantize_luts(const float* lut, int n_q, int M, int ksub, std::uint8_t* qlut, Int8LutParams* params) {
    AQPIM_CHECK(ksub == 16 || ksub == 256, "quantize_luts: ksub={} (int8 tables are for 4- and 8-bit codes)", ksub);
    if (active_simd_level() == SimdLevel::avx512) return quantize_luts_avx512(lut, n_q, M, ksub, qlut, params);
    // SSE4.1 (in the x86-64-v2 baseline), one subspace's 16 entries in four registers.
    using sse::hmax, sse::hmin;
    quantize_luts_with(
        lut, n_q, M, ksub, qlut, params,
        [](const float* row, int n, float& lo, float& hi) {
            __m128 vlo = _mm_loadu_ps(row), vhi = vlo;
            for (int c = 4; c < n; c += 4) {
                const __m128 v = _mm_loadu_ps(row + c);
                vlo = _mm_min_ps(vlo, v);
                vhi = _mm_max_ps(vhi, v);
            }
            lo = hmin(vlo);
            hi = hmax(vhi);
        },
        [](const float* row, int n, float lo, float inv, std::uint8_t* out) {
            const __m128 vlo = _mm_set1_ps(lo), vinv = _mm_set1_ps(inv), zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f);
            for (int c = 0; c < n; c += 16) {
                __m128i q[4];
                for (int i = 0; i < 4; ++i) {
                    const __m128 r = _mm_round_ps(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(row + c + 4 * i), vlo), vinv),
                                                  _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
                    q[i] = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(r, zero), top));
                }
                _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c),
                                 _mm_packus_epi16(_mm_packus_epi32(q[0], q[1]), _mm_packus_epi32(q[2], q[3])));
            }
        });
}

void subspace_columns(const float* cb, int ksub, int dsub, float* col) {
    int d0 = 0;
    for (; d0 + 4 <= dsub; d0 += 4)  // 4 x 4 blocks: codes c0..c0+3, dims d0..d0+3
        for (int c0 = 0; c0 + 4 <= ksub; c0 += 4) {
            __m128 r0 = _mm_loadu_ps(cb + (c0 + 0) * dsub + d0), r1 = _mm_loadu_ps(cb + (c0 + 1) * dsub + d0);
            __m128 r2 = _mm_loadu_ps(cb + (c0 + 2) * dsub + d0), r3 = _mm_loadu_ps(cb + (c0 + 3) * dsub + d0);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps(col + (d0 + 0) * ksub + c0, r0);
            _mm_storeu_ps(col + (d0 + 1) * ksub + c0, r1);
            _mm_storeu_ps(col + (d0 + 2) * ksub + c0, r2);
            _mm_storeu_ps(col + (d0 + 3) * ksub + c0, r3);
        }
    for (; d0 < dsub; ++d0)
        for (int c = 0; c < ksub; ++c) col[d0 * ksub + c] = cb[c * dsub + d0];
}

void codebook_columns(const float* centroids, int M, int dsub, float* columns) {
    for (int m = 0; m < M; ++m)
        subspace_columns(centroids + std::int64_t(m) * 16 * dsub, 16, dsub, columns + std::int64_t(m) * dsub * 16);
}

void hist_times_codebook(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out) {
    // No test for empty bins (it would stop the vectorization; with 8-bit codes over a long
    // context few are empty).
    const SimdLevel level = active_simd_level();
    if (level == SimdLevel::avx512 && hist_times_codebook_avx512(hist, n_q, M, ksub, dsub, centroids, out)) return;
    if (level == SimdLevel::avx2 && hist_times_codebook_avx2(hist, n_q, M, ksub, dsub, centroids, out)) return;
    if (hist_codebook::rows(hist, n_q, M, ksub, dsub, centroids, out)) return;
    const int D = M * dsub;
    for (int m = 0; m < M; ++m)
        for (int c = 0; c < ksub; ++c) {
            const float* cw = centroids + (std::int64_t(m) * ksub + c) * dsub;
            const float* bin = hist + (std::int64_t(m) * ksub + c) * n_q;
            for (int h = 0; h < n_q; ++h) {
                float* o = out + std::int64_t(h) * D + m * dsub;
                for (int d = 0; d < dsub; ++d) o[d] += bin[h] * cw[d];
            }
        }
}

}  // namespace aqpim
