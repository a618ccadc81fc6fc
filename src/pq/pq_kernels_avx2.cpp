// AVX2 LUT kernels. A 16-float table is two registers; a 4-bit lookup is two vpermps (low 3 bits
// of the index) and a blend on bit 3. A 4-bit group (aqpim/pq_codes.h) is two registers of 8
// dwords (tokens 0-7 / 16-23 and 8-15 / 24-31); a shift by 8j (+4) brings subspace 4g+j's codes
// to the low nibbles.

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "aqpim/pq_codes.h"
#include "pq/code_groups.h"
#include "pq/hist_times_codebook.h"
#include "simd/avx2_util.h"
#include "simd/static_dispatch.h"
#include "pq/pq_kernels_isa.h"
#include "simd/prefetch.h"

namespace aqpim {

namespace {

constexpr int kMaxHeads = 4;

// 16-entry lookup of 8 indices (0..15).
inline __m256 lookup16(__m256i idx, __m256 t0, __m256 t1) {
    const __m256 v0 = _mm256_permutevar8x32_ps(t0, idx), v1 = _mm256_permutevar8x32_ps(t1, idx);
    return _mm256_blendv_ps(v0, v1, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

// Index vectors of subspace 4g+J of a group for tokens 0-7, 8-15, 16-23, 24-31 (garbage above bit 3).
template <int J>
inline void group_indices(const std::uint8_t* group, __m256i idx[4]) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32));
    idx[0] = J == 0 ? a : _mm256_srli_epi32(a, 8 * J);
    idx[1] = J == 0 ? b : _mm256_srli_epi32(b, 8 * J);
    idx[2] = _mm256_srli_epi32(a, 8 * J + 4);
    idx[3] = _mm256_srli_epi32(b, 8 * J + 4);
}

template <int NQ>
void scan_f32_4bit(const float* lut, int M, const std::uint8_t* blocks, std::int64_t n_blocks, float* scores,
                   std::int64_t stride) {
    const std::size_t block_bytes = code_block_bytes(M, 4);
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        prefetch_stream(block, block_bytes);
        __m256 acc[NQ][4];
        for (int h = 0; h < NQ; ++h)
            for (int g = 0; g < 4; ++g) acc[h][g] = _mm256_setzero_ps();
        for (int grp = 0; grp < (M + 3) / 4; ++grp)
            for_subspaces_in_group(std::min(4, M - 4 * grp), [&](auto J) {
                __m256i idx[4];
                group_indices<J()>(block + grp * 64, idx);
                for (int h = 0; h < NQ; ++h) {
                    const float* table = lut + (std::int64_t(h) * M + 4 * grp + J()) * 16;
                    const __m256 t0 = _mm256_loadu_ps(table), t1 = _mm256_loadu_ps(table + 8);
                    for (int g = 0; g < 4; ++g) acc[h][g] = _mm256_add_ps(acc[h][g], lookup16(idx[g], t0, t1));
                }
            });
        for (int h = 0; h < NQ; ++h)
            for (int g = 0; g < 4; ++g) _mm256_storeu_ps(scores + h * stride + b * 32 + g * 8, acc[h][g]);
    }
}

void scan_f32_8bit(const float* lut, int n_q, int M, const std::uint8_t* blocks, std::int64_t n_blocks, float* scores,
                   std::int64_t stride) {
    const std::size_t block_bytes = code_block_bytes(M, 8);
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        prefetch_stream(block, block_bytes);
        for (int h = 0; h < n_q; ++h) {
            __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int m = 0; m < M; ++m) {
                const float* table = lut + (std::int64_t(h) * M + m) * 256;
                for (int g = 0; g < 4; ++g) {
                    const __m256i idx = _mm256_cvtepu8_epi32(
                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + m * 32 + g * 8)));
                    acc[g] = _mm256_add_ps(acc[g], _mm256_i32gather_ps(table, idx, 4));
                }
            }
            for (int g = 0; g < 4; ++g) _mm256_storeu_ps(scores + h * stride + b * 32 + g * 8, acc[g]);
        }
    }
}

// One subspace's ND dims (ND <= 2) for NQ heads over every block: NQ x ND accumulators in
// registers, the codebook columns read by the permutes from L1. ND is a compile-time count (with
// a run-time one GCC may keep the accumulators on the stack, as it did in the AVX-512 kernel).
template <int NQ, int ND, int J>
void values_perm_dims(const float* p, std::int64_t p_stride, const std::uint8_t* group0, std::size_t block_bytes,
                      std::int64_t n_blocks, const float* columns, float* out, int D) {
    __m256 acc[NQ][ND];
    for (int h = 0; h < NQ; ++h)
        for (int j = 0; j < ND; ++j) acc[h][j] = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        __m256i idx[4];
        group_indices<J>(group0 + b * block_bytes, idx);
        for (int g = 0; g < 4; ++g)
            for (int j = 0; j < ND; ++j) {
                const __m256 v = lookup16(idx[g], _mm256_loadu_ps(columns + j * 16), _mm256_loadu_ps(columns + j * 16 + 8));
                for (int h = 0; h < NQ; ++h)
                    acc[h][j] = _mm256_fmadd_ps(_mm256_loadu_ps(p + h * p_stride + b * 32 + g * 8), v, acc[h][j]);
            }
    }
    for (int h = 0; h < NQ; ++h)
        for (int j = 0; j < ND; ++j) out[std::int64_t(h) * D + j] += hsum(acc[h][j]);
}

// Subspace-outer: the accumulators of one subspace's dims stay in registers while the tile's
// blocks stream by.
template <int NQ>
void values_perm_heads(const float* p, std::int64_t p_stride, int M, int dsub, const std::uint8_t* blocks,
                       std::int64_t n_blocks, const float* columns, float* out, int D) {
    const std::size_t block_bytes = code_block_bytes(M, 4);
    for (int grp = 0; grp < (M + 3) / 4; ++grp)
        for_subspaces_in_group(std::min(4, M - 4 * grp), [&](auto J) {
            const int m = 4 * grp + J();
            for (int d0 = 0; d0 < dsub; d0 += 2)
                with_count<2>(std::min(2, dsub - d0), [&](auto ND) {
                    values_perm_dims<NQ, ND(), J()>(p, p_stride, blocks + grp * 64, block_bytes, n_blocks,
                                                    columns + (std::int64_t(m) * dsub + d0) * 16, out + m * dsub + d0, D);
                });
        });
}

}  // namespace

void build_lut_avx2(const float* qy, int n_q, int M, int ksub, int dsub, const float* centroids, float* lut,
                    float* columns) {
    if (ksub % 8 != 0) return build_lut_ref(qy, n_q, M, ksub, dsub, centroids, lut, columns);
    const int D = M * dsub;
    // Each subspace transposed to columns in turn (as build_lut_avx512), then 8 centroids per FMA;
    // NQ compile-time, so the accumulators stay in registers.
    for (int m = 0; m < M; ++m) {
        subspace_columns(centroids + std::int64_t(m) * ksub * dsub, ksub, dsub, columns);
        for_head_groups<kMaxHeads>(n_q, [&](auto NQ, int h0) {
            for (int c0 = 0; c0 < ksub; c0 += 8) {
                __m256 acc[NQ()];
                for (int h = 0; h < NQ(); ++h) acc[h] = _mm256_setzero_ps();
                for (int d = 0; d < dsub; ++d) {
                    const __m256 col = _mm256_loadu_ps(columns + std::size_t(d) * ksub + c0);
                    for (int h = 0; h < NQ(); ++h)
                        acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(qy[std::int64_t(h0 + h) * D + m * dsub + d]), col, acc[h]);
                }
                for (int h = 0; h < NQ(); ++h) _mm256_storeu_ps(lut + (std::int64_t(h0 + h) * M + m) * ksub + c0, acc[h]);
            }
        });
    }
}

void scan_f32_avx2(const float* lut, int n_q, int M, int nbits, const std::uint8_t* blocks, std::int64_t n_blocks,
                   float* scores, std::int64_t score_stride) {
    if (nbits == 8) return scan_f32_8bit(lut, n_q, M, blocks, n_blocks, scores, score_stride);
    for_head_groups<kMaxHeads>(n_q, [&](auto NQ, int h0) {
        scan_f32_4bit<NQ()>(lut + std::int64_t(h0) * M * 16, M, blocks, n_blocks, scores + h0 * score_stride,
                            score_stride);
    });
}

void values_perm_avx2(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                      std::int64_t n_blocks, const float* columns, float* out) {
    const int D = M * dsub;
    for_head_groups<kMaxHeads>(n_q, [&](auto NQ, int h0) {
        values_perm_heads<NQ()>(p + h0 * p_stride, p_stride, M, dsub, blocks, n_blocks, columns,
                                out + std::int64_t(h0) * D, D);
    });
}

bool hist_times_codebook_avx2(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out) {
    return hist_codebook::rows(hist, n_q, M, ksub, dsub, centroids, out);
}

}  // namespace aqpim
