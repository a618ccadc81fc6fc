// AVX-512 LUT kernels. A 4-bit group (aqpim/pq_codes.h) is 16 dwords, one per token pair (i, i+16);
// shifting it right by 8j (or 8j + 4) leaves subspace 4g+j's codes of tokens 0-15 (or 16-31) in
// the low nibbles, and vpermps, which reads only the low 4 bits of each index, looks the 16 tokens
// up in a 16-float table held in one register: 16 exact lookups, no unpacking.

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "aqpim/pq_codes.h"
#include "pq/code_groups.h"
#include "pq/hist_times_codebook.h"
#include "simd/avx512_util.h"
#include "simd/static_dispatch.h"
#include "pq/pq_kernels_isa.h"
#include "pq/quantize_luts.h"
#include "simd/prefetch.h"

namespace aqpim {

namespace {

constexpr int kMaxHeads = 8;  // heads per pass over the codes (register budget)

inline __m512i load_group(const std::uint8_t* p) { return _mm512_loadu_si512(p); }

// Index vectors of subspace 4g+J for tokens 0-15 (lo) and 16-31 (hi) from a group's dwords.
template <int J>
inline void group_indices(__m512i d, __m512i& lo, __m512i& hi) {
    lo = J == 0 ? d : _mm512_srli_epi32(d, 8 * J);
    hi = _mm512_srli_epi32(d, 8 * J + 4);
}

template <int NQ>
void scan_f32_4bit(const float* lut, int M, const std::uint8_t* blocks, std::int64_t n_blocks, float* scores,
                   std::int64_t stride) {
    // Even and odd subspaces accumulate separately: two add chains of M/2 per half-block instead
    // of one of M, so the 4-cycle add latency stays hidden when few heads share the pass.
    const std::size_t block_bytes = code_block_bytes(M, 4);
    const int n_groups = (M + 3) / 4;
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        prefetch_stream(block, block_bytes);
        __m512 lo[2][NQ], hi[2][NQ];
        for (int e = 0; e < 2; ++e)
            for (int h = 0; h < NQ; ++h) lo[e][h] = hi[e][h] = _mm512_setzero_ps();
        for (int g = 0; g < n_groups; ++g) {
            const __m512i d = load_group(block + g * 64);
            for_subspaces_in_group(std::min(4, M - 4 * g), [&](auto J) {
                __m512i c_lo, c_hi;
                group_indices<J()>(d, c_lo, c_hi);
                constexpr int e = J() & 1;
                for (int h = 0; h < NQ; ++h) {
                    const __m512 table = _mm512_loadu_ps(lut + (std::int64_t(h) * M + 4 * g + J()) * 16);
                    lo[e][h] = _mm512_add_ps(lo[e][h], _mm512_permutexvar_ps(c_lo, table));
                    hi[e][h] = _mm512_add_ps(hi[e][h], _mm512_permutexvar_ps(c_hi, table));
                }
            });
        }
        for (int h = 0; h < NQ; ++h) {
            _mm512_storeu_ps(scores + h * stride + b * 32, _mm512_add_ps(lo[0][h], lo[1][h]));
            _mm512_storeu_ps(scores + h * stride + b * 32 + 16, _mm512_add_ps(hi[0][h], hi[1][h]));
        }
    }
}

void scan_f32_8bit(const float* lut, int n_q, int M, const std::uint8_t* blocks, std::int64_t n_blocks, float* scores,
                   std::int64_t stride) {
    const std::size_t block_bytes = code_block_bytes(M, 8);
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        prefetch_stream(block, block_bytes);
        for (int h = 0; h < n_q; ++h) {
            __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
            for (int m = 0; m < M; ++m) {
                const float* table = lut + (std::int64_t(h) * M + m) * 256;
                const __m512i c_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + m * 32)));
                const __m512i c_hi =
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + m * 32 + 16)));
                lo = _mm512_add_ps(lo, _mm512_i32gather_ps(c_lo, table, 4));
                hi = _mm512_add_ps(hi, _mm512_i32gather_ps(c_hi, table, 4));
            }
            _mm512_storeu_ps(scores + h * stride + b * 32, lo);
            _mm512_storeu_ps(scores + h * stride + b * 32 + 16, hi);
        }
    }
}

// One subspace's ND dims (ND <= 4) for NQ heads over every block. The NQ x ND accumulators and
// the block's 2 x NQ weights stay in registers; the ND codebook columns are read from L1 by the
// permutes themselves (a memory operand), which keeps NQ = 4 within the 32 registers.
template <int NQ, int ND, int J>
void values_perm_dims(const float* p, std::int64_t p_stride, const std::uint8_t* group0, std::size_t block_bytes,
                      std::int64_t n_blocks, const float* columns, float* out, int D) {
    __m512 acc[NQ][ND];
    for (int h = 0; h < NQ; ++h)
        for (int j = 0; j < ND; ++j) acc[h][j] = _mm512_setzero_ps();
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        __m512i c_lo, c_hi;
        group_indices<J>(load_group(group0 + b * block_bytes), c_lo, c_hi);
        __m512 p_lo[NQ], p_hi[NQ];
        for (int h = 0; h < NQ; ++h) {
            p_lo[h] = _mm512_loadu_ps(p + h * p_stride + b * 32);
            p_hi[h] = _mm512_loadu_ps(p + h * p_stride + b * 32 + 16);
        }
        for (int j = 0; j < ND; ++j) {
            const __m512 v_lo = _mm512_permutexvar_ps(c_lo, _mm512_loadu_ps(columns + j * 16));
            const __m512 v_hi = _mm512_permutexvar_ps(c_hi, _mm512_loadu_ps(columns + j * 16));
            for (int h = 0; h < NQ; ++h) acc[h][j] = _mm512_fmadd_ps(p_hi[h], v_hi, _mm512_fmadd_ps(p_lo[h], v_lo, acc[h][j]));
        }
    }
    add_lane_sums<NQ, ND>(acc, out, D);
}

template <int NQ>
void values_perm_heads(const float* p, std::int64_t p_stride, int M, int dsub, const std::uint8_t* blocks,
                       std::int64_t n_blocks, const float* columns, float* out, int D) {
    // Subspace-outer so the accumulators of one subspace's dims stay in registers while the
    // tile's blocks stream by (the tile's codes and weights are L1/L2 resident).
    const std::size_t block_bytes = code_block_bytes(M, 4);
    for (int g = 0; g < (M + 3) / 4; ++g)
        for_subspaces_in_group(std::min(4, M - 4 * g), [&](auto J) {
            const int m = 4 * g + J();
            const std::uint8_t* group0 = blocks + g * 64;
            for (int d = 0; d < dsub; d += 4) {
                const float* cols = columns + (std::int64_t(m) * dsub + d) * 16;
                float* o = out + m * dsub + d;
                with_count<4>(std::min(4, dsub - d), [&](auto ND) {
                    values_perm_dims<NQ, ND(), J()>(p, p_stride, group0, block_bytes, n_blocks, cols, o, D);
                });
            }
        });
}

}  // namespace

void quantize_luts_avx512(const float* lut, int n_q, int M, int ksub, std::uint8_t* qlut, Int8LutParams* params) {
    quantize_luts_with(
        lut, n_q, M, ksub, qlut, params,
        [](const float* row, int n, float& lo, float& hi) {
            __m512 vlo = _mm512_loadu_ps(row), vhi = vlo;
            for (int c = 16; c < n; c += 16) {
                const __m512 v = _mm512_loadu_ps(row + c);
                vlo = _mm512_min_ps(vlo, v);
                vhi = _mm512_max_ps(vhi, v);
            }
            lo = _mm512_reduce_min_ps(vlo);
            hi = _mm512_reduce_max_ps(vhi);
        },
        [](const float* row, int n, float lo, float inv, std::uint8_t* out) {
            const __m512 vlo = _mm512_set1_ps(lo), vinv = _mm512_set1_ps(inv), top = _mm512_set1_ps(255.0f);
            for (int c = 0; c < n; c += 16) {
                const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(row + c), vlo), vinv);
                const __m512 r = _mm512_roundscale_ps(x, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
                const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, _mm512_setzero_ps()), top));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c), _mm512_cvtusepi32_epi8(q));
            }
        });
}

void build_lut_avx512(const float* qy, int n_q, int M, int ksub, int dsub, const float* centroids, float* lut,
                      float* columns) {
    if (ksub % 16 != 0) return build_lut_ref(qy, n_q, M, ksub, dsub, centroids, lut, columns);
    const int D = M * dsub;
    // The codebook transposed to columns [M][dsub][ksub] once per call, then one FMA per head, 16
    // centroids and dim, in the reference's order. 16-lane gathers instead (one per 16 centroids
    // and dim) made 4-bit tables cost as much as scanning a 1K-token codebook version and 8-bit
    // ones 2.5x what they cost now (docs/pq-kernels.md "Lookup tables"). NQ a compile-time count,
    // so the accumulators are registers (with a run-time count GCC kept them on the stack).
    if (ksub == 16)  // codebook_columns: the transposes with the count of codes a constant
        codebook_columns(centroids, M, dsub, columns);
    else
        for (int m = 0; m < M; ++m)
            subspace_columns(centroids + std::int64_t(m) * ksub * dsub, ksub, dsub, columns + std::size_t(m) * ksub * dsub);
    with_constant<16, 256>(ksub, [&](auto KS) {  // 4 and 8 bits with the centroid count a constant
        const int K = KS() > 0 ? KS() : ksub;
        for_head_groups<kMaxHeads>(n_q, [&](auto NQ, int h0) {
            for (int m = 0; m < M; ++m) {
                const float* cm = columns + std::size_t(m) * K * dsub;
                const float* qm = qy + std::int64_t(h0) * D + m * dsub;
                for (int c0 = 0; c0 < K; c0 += 16) {
                    __m512 acc[NQ()];
                    for (int h = 0; h < NQ(); ++h) acc[h] = _mm512_setzero_ps();
                    for (int d = 0; d < dsub; ++d) {
                        const __m512 col = _mm512_loadu_ps(cm + std::size_t(d) * K + c0);
                        for (int h = 0; h < NQ(); ++h) acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(qm[h * D + d]), col, acc[h]);
                    }
                    for (int h = 0; h < NQ(); ++h) _mm512_storeu_ps(lut + (std::int64_t(h0 + h) * M + m) * K + c0, acc[h]);
                }
            }
        });
    });
}

void scan_f32_avx512(const float* lut, int n_q, int M, int nbits, const std::uint8_t* blocks, std::int64_t n_blocks,
                     float* scores, std::int64_t score_stride) {
    if (nbits == 8) return scan_f32_8bit(lut, n_q, M, blocks, n_blocks, scores, score_stride);
    for_head_groups<kMaxHeads>(n_q, [&](auto NQ, int h0) {
        scan_f32_4bit<NQ()>(lut + std::int64_t(h0) * M * 16, M, blocks, n_blocks, scores + h0 * score_stride,
                            score_stride);
    });
}

// The by-four-heads 8-bit scan is bound by loads and their addresses, not by vector width: the
// AVX2 kernel (scan_8bit_by4_avx2.cpp) serves this level too.
void scan_f32_8bit_by4_avx512(const float* lut4, int n_q, int M, const std::uint8_t* blocks, std::int64_t n_blocks,
                              float* scores, std::int64_t score_stride) {
    scan_f32_8bit_by4_avx2(lut4, n_q, M, blocks, n_blocks, scores, score_stride);
}

void values_perm_avx512(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                        std::int64_t n_blocks, const float* columns, float* out) {
    const int D = M * dsub;
    for_head_groups<kMaxHeads>(n_q, [&](auto NQ, int h0) {
        values_perm_heads<NQ()>(p + h0 * p_stride, p_stride, M, dsub, blocks, n_blocks, columns,
                                out + std::int64_t(h0) * D, D);
    });
}

namespace {

// One register holds P = 16 / dsub consecutive centroid rows of a subspace and, when all n_q heads'
// bins of those P codes fit in one (P * n_q <= 16; GQA 4 at dsub 4 or 8), one load holds their
// bins too: a permute per head spreads its P bins over the rows' lanes and one FMA adds P codes'
// terms for it. Per 16 MACs: a permute and an FMA, where the row template spends a broadcast load
// and a multiply-add per dsub (8-bit codes at M = 16, GQA 4: 16.3 us per call before).
template <int DSUB, int NQ>
void hist_rows_packed(const float* hist, int M, int ksub, const float* centroids, float* out) {
    constexpr int P = 16 / DSUB;
    const int D = M * DSUB;
    const __mmask16 bins_mask = __mmask16((1u << (P * NQ)) - 1);
    __m512i spread[NQ];
    for (int h = 0; h < NQ; ++h) {
        alignas(64) std::int32_t idx[16];
        for (int j = 0; j < 16; ++j) idx[j] = (j / DSUB) * NQ + h;
        spread[h] = _mm512_load_si512(idx);
    }
    for (int m = 0; m < M; ++m) {
        const float* bins = hist + std::int64_t(m) * ksub * NQ;
        const float* rows = centroids + std::int64_t(m) * ksub * DSUB;
        __m512 acc[NQ];
        for (int h = 0; h < NQ; ++h) acc[h] = _mm512_setzero_ps();
        for (int c = 0; c < ksub; c += P) {
            const __m512 r = _mm512_loadu_ps(rows + c * DSUB);
            const __m512 b = _mm512_maskz_loadu_ps(bins_mask, bins + c * NQ);
            for (int h = 0; h < NQ; ++h) acc[h] = _mm512_fmadd_ps(_mm512_permutexvar_ps(spread[h], b), r, acc[h]);
        }
        for (int h = 0; h < NQ; ++h) {
            alignas(64) float lanes[16];
            _mm512_store_ps(lanes, acc[h]);
            float* o = out + std::int64_t(h) * D + m * DSUB;
            for (int d = 0; d < DSUB; ++d) {
                float sum = 0;
                for (int i = 0; i < P; ++i) sum += lanes[i * DSUB + d];
                o[d] += sum;
            }
        }
    }
}

}  // namespace

bool hist_times_codebook_avx512(const float* hist, int n_q, int M, int ksub, int dsub, const float* centroids, float* out) {
    if ((dsub == 4 || dsub == 8) && n_q * (16 / dsub) <= 16 && ksub % (16 / dsub) == 0) {
        with_count<8>(n_q, [&](auto NQ) {
            if constexpr (NQ() * 4 <= 16)
                if (dsub == 4) return hist_rows_packed<4, NQ()>(hist, M, ksub, centroids, out);
            hist_rows_packed<8, NQ()>(hist, M, ksub, centroids, out);  // NQ <= 8: 2 NQ lanes fit
        });
        return true;
    }
    return hist_codebook::rows(hist, n_q, M, ksub, dsub, centroids, out);
}

}  // namespace aqpim
