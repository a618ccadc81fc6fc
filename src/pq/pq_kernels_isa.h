#pragma once
// Per-ISA entries of aqpim::PqKernels (see aqpim/pq_kernels.h for the contracts).

#include "aqpim/pq_kernels.h"

namespace aqpim {

// Score scans read their code blocks as a stream and prefetch them with prefetch_stream
// (simd/prefetch.h): the scan alone runs at several GB/s, and the hardware prefetcher alone leaves
// it waiting on DRAM.

/// quantize_luts with one 16-entry subspace per register (its SSE4.1 form, four registers and
/// shuffle reductions per subspace, was 2.1% of a batch-32 x 8K decode step: every codebook
/// version's tables are quantized per call).
void quantize_luts_avx512(const float* lut, int n_q, int M, int ksub, std::uint8_t* qlut, Int8LutParams* params);

/// hist_times_codebook at dsub 2, 4 or 8 (false elsewhere), compiled for the level
/// (pq/hist_times_codebook.h).
bool hist_times_codebook_avx2(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out);
bool hist_times_codebook_avx512(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out);

#define AQPIM_DECLARE_PQ_KERNELS(isa)                                                                            \
    void build_lut_##isa(const float* qy, int n_q, int M, int ksub, int dsub, const float* centroids, float* lut, float* columns); \
    void scan_f32_##isa(const float* lut, int n_q, int M, int nbits, const std::uint8_t* blocks,                 \
                        std::int64_t n_blocks, float* scores, std::int64_t score_stride);                          \
    void scan_f32_8bit_by4_##isa(const float* lut4, int n_q, int M, const std::uint8_t* blocks,                \
                                 std::int64_t n_blocks, float* scores, std::int64_t score_stride);                 \
    void scan_i8_##isa(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M, int nbits,         \
                       const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride); \
    void values_hist_##isa(const float* p, std::int64_t p_stride, int n_q, int M, int nbits,                     \
                           const std::uint8_t* blocks, std::int64_t n_blocks, float* hist);                        \
    void values_perm_##isa(const float* p, std::int64_t p_stride, int n_q, int M, int dsub,                      \
                           const std::uint8_t* blocks, std::int64_t n_blocks, const float* columns, float* out);

AQPIM_DECLARE_PQ_KERNELS(ref)
AQPIM_DECLARE_PQ_KERNELS(avx2)
AQPIM_DECLARE_PQ_KERNELS(avx512)

#undef AQPIM_DECLARE_PQ_KERNELS

// The pair-histogram pass is bound by its read-modify-writes, not by vector width: the AVX-512
// level uses the AVX2 one (as the 8-bit histogram pass).
void values_pairs_ref(const float* p, std::int64_t p_stride, int n_q, int M, const std::uint8_t* blocks,
                      std::int64_t n_blocks, float* pair_hist);
// 8-bit codes with int8 tables: VBMI byte permutes at the AVX-512 level (scan_i8_8bit_avx512.cpp);
// the AVX2 level takes the reference (its fast 8-bit scan is scan_f32_8bit_by4).
void scan_i8_8bit_avx512(const std::uint8_t* qlut, const Int8LutParams* params, int n_q, int M,
                         const std::uint8_t* blocks, std::int64_t n_blocks, float* scores, std::int64_t score_stride);
// The bf16 value pass exists at the AVX-512 level only (values_bf16_avx512.cpp, AVX512-BF16).
void values_bf16_avx512(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                        std::int64_t n_blocks, const float* columns, float* out);
void values_pairs_avx2(const float* p, std::int64_t p_stride, int n_q, int M, const std::uint8_t* blocks,
                       std::int64_t n_blocks, float* pair_hist);

}  // namespace aqpim
