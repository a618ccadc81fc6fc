#pragma once
// Lookup-table kernels over PQ codes laid out for scanning (aqpim/pq_codes.h). Everything here
// works in quantizer space (ProductQuantizer::transform_query for queries, centroids() for
// codebooks). A GQA group's n_q query heads share one pass over the codes: codes are loaded and
// unpacked once and looked up in every head's table.
//
// Shapes: lut [n_q][M][ksub] f32; qlut [n_q][M][ksub] u8 (ksub 16 or 256); centroids [M][ksub][dsub];
// scores/p [n_q][score_stride] with score_stride >= 32 * n_blocks; hist [M][ksub][n_q];
// out [n_q][D] with D = M * dsub.

#include <cstddef>
#include <cstdint>

#include "aqpim/simd.h"

namespace aqpim {

/// Int8 tables for the byte-permute fast paths (4- and 8-bit codes): per head h,
///   lut[h][m][c] ≈ bias[h] / M + scale[h] * qlut[h][m][c]   (per-subspace minima folded in bias)
/// so score ≈ bias[h] + scale[h] * Σ_m qlut[h][m][code_m]. Rounding error per token is at most
/// M * scale[h] / 2 (see docs/pq-kernels.md for the measured error).
struct Int8LutParams {
    float scale;  ///< step of the u8 grid
    float bias;   ///< Σ_m min_c lut[h][m][c]
};

struct PqKernels {
    /// lut[h][m][c] = qy[h][m*dsub : (m+1)*dsub] · centroids[m][c]. columns: the caller's scratch of
    /// lut_columns_floats(M, ksub, dsub) floats (the codebooks transposed; the reference reads none).
    void (*build_lut)(const float* qy, int n_q, int M, int ksub, int dsub, const float* centroids, float* lut,
                      float* columns);
    /// scores[h][t] = Σ_m lut[h][m][code(t, m)] for every token of n_blocks blocks (padding too).
    void (*scan_f32)(const float* lut, int n_q, int M, int nbits, const std::uint8_t* blocks, std::int64_t n_blocks,
                     float* scores, std::int64_t score_stride);
    /// scan_f32 for 8-bit codes with the tables interleaved by head (see interleave_luts_by4):
    /// lut4 [ceil(n_q / 4)][M][256][4], entry [g][m][c][j] = lut[4g + j][m][c]. One 16-byte load
    /// looks a code up for four heads, where the gather of scan_f32 takes one lane per head.
    void (*scan_f32_8bit_by4)(const float* lut4, int n_q, int M, const std::uint8_t* blocks, std::int64_t n_blocks,
                              float* scores, std::int64_t score_stride);
    /// Same with int8 tables: scores[h][t] = bias[h] + scale[h] * Σ_m qlut[h][m][code], M <= 256 (u16
    /// sums). 4-bit codes: one vpermb per 64 lookups (avx512), pshufb (avx2). 8-bit codes: two vpermi2b
    /// and a blend per 64 lookups at the avx512 level (VBMI); the scalar reference at the others, where
    /// scan_f32_8bit_by4 is the fast 8-bit scan (see int8_scores_8bit_fast).
    void (*scan_i8)(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M, int nbits,
                    const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride);
    /// hist[m][c][h] += Σ_{t: code(t,m) = c} p[h][t] over the blocks' 32 * n_blocks tokens.
    void (*values_hist)(const float* p, std::int64_t p_stride, int n_q, int M, int nbits, const std::uint8_t* blocks,
                        std::int64_t n_blocks, float* hist);
    /// out[h][m*dsub + d] += Σ_t p[h][t] * columns[m][d][code(t,m)]  (nbits 4 only): codebook columns
    /// (see codebook_columns) fetched by register permutes, no histogram.
    void (*values_perm)(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                        std::int64_t n_blocks, const float* columns, float* out);
    /// pair_hist[h/4][p][code(t,2p) | code(t,2p+1) << 4][h%4] += p[h][t]  (nbits 4 only), p over the
    /// 2 * ceil(M/4) pairs of the layout's groups (subspaces past M read as code 0); see
    /// pair_hist_floats and pair_hist_marginals.
    void (*values_pairs)(const float* p, std::int64_t p_stride, int n_q, int M, const std::uint8_t* blocks,
                         std::int64_t n_blocks, float* pair_hist);
    /// values_perm with weights and columns rounded to bf16, two tokens per multiply-add
    /// (AVX512-BF16; null at levels without it, and unusable where cpu_has_avx512_bf16() is false).
    void (*values_bf16)(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                        std::int64_t n_blocks, const float* columns, float* out);
};
const PqKernels& pq_kernels(SimdLevel level);
const PqKernels& pq_kernels();  ///< active level

/// Tables lut [n_q][M][256] as scan_f32_8bit_by4 reads them: lut4 [ceil(n_q / 4)][M][256][4], the
/// lanes of heads past n_q zero.
void interleave_luts_by4(const float* lut, int n_q, int M, float* lut4);

/// Quantize float tables (ksub 16 or 256) to the int8 path's u8 tables; qlut [n_q][M][ksub].
void quantize_luts(const float* lut, int n_q, int M, int ksub, std::uint8_t* qlut, Int8LutParams* params);
/// Whether the active level scans 8-bit codes with int8 tables faster than with float ones (the
/// avx512 level's VBMI kernel); elsewhere int8 tables for 8-bit codes take the scalar reference.
bool int8_scores_8bit_fast();

/// Floats of build_lut's column scratch: the M codebooks [ksub][dsub] as columns.
inline std::size_t lut_columns_floats(int M, int ksub, int dsub) { return std::size_t(M) * ksub * dsub; }

/// One subspace's centroids [ksub][dsub] as columns [dsub][ksub] (ksub a multiple of 4).
void subspace_columns(const float* centroids, int ksub, int dsub, float* columns);
/// Transpose 4-bit codebooks [M][16][dsub] into columns [M][dsub][16] for values_perm.
void codebook_columns(const float* centroids, int M, int dsub, float* columns);

/// Floats of values_pairs' pair histograms: [ceil(n_q/4)][2 ceil(M/4)][256][4].
std::size_t pair_hist_floats(int n_q, int M);
/// hist[m][c][h] += the pair histograms summed over the other subspace of m's pair (hist as values_hist's).
void pair_hist_marginals(const float* pair_hist, int n_q, int M, float* hist);

/// out[h][m*dsub + d] += Σ_c hist[m][c][h] * centroids[m][c][d]  (second half of the histogram path).
void hist_times_codebook(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out);

}  // namespace aqpim
