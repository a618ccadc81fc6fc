// AVX-512 LUT kernels. 4-bit rows: byte i = code(token i) | code(token i + 16) << 4, so one 16-byte
// row widened to 16 dwords gives tokens 0-15 in the low nibbles and 16-31 in the high nibbles, and
// a 16-float table is one register: vpermps does 16 exact lookups.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"

namespace aqpim {

namespace {

constexpr int kMaxHeads = 8;  // heads per pass over the codes (register budget)

inline __m512i load_row4(const std::uint8_t* row) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
}

template <int NQ>
void scan_f32_4bit(const float* lut, int M, const std::uint8_t* blocks, std::int64_t n_blocks, float* scores,
                   std::int64_t stride) {
    // Even and odd subspaces accumulate separately: two add chains of M/2 per half-block instead
    // of one of M, so the 4-cycle add latency stays hidden when few heads share the pass.
    const __m512i low4 = _mm512_set1_epi32(0x0f);
    const std::size_t block_bytes = code_block_bytes(M, 4);
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + b * block_bytes;
        __m512 lo[2][NQ], hi[2][NQ];
        for (int e = 0; e < 2; ++e)
            for (int h = 0; h < NQ; ++h) lo[e][h] = hi[e][h] = _mm512_setzero_ps();
        auto step = [&](int m, int e) {
            const __m512i c = load_row4(block + m * 16);
            const __m512i c_lo = _mm512_and_si512(c, low4), c_hi = _mm512_srli_epi32(c, 4);
            for (int h = 0; h < NQ; ++h) {
                const __m512 table = _mm512_loadu_ps(lut + (std::int64_t(h) * M + m) * 16);
                lo[e][h] = _mm512_add_ps(lo[e][h], _mm512_permutexvar_ps(c_lo, table));
                hi[e][h] = _mm512_add_ps(hi[e][h], _mm512_permutexvar_ps(c_hi, table));
            }
        };
        int m = 0;
        for (; m + 2 <= M; m += 2) {
            step(m, 0);
            step(m + 1, 1);
        }
        if (m < M) step(m, 0);
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

template <int NQ>
void values_perm_heads(const float* p, std::int64_t p_stride, int M, int dsub, const std::uint8_t* blocks,
                       std::int64_t n_blocks, const float* columns, float* out, int D) {
    // Subspace-outer so the NQ x dsub accumulators of one subspace stay in registers while the
    // tile's blocks stream by (the tile's codes and weights are L1/L2 resident).
    const __m512i low4 = _mm512_set1_epi32(0x0f);
    const std::size_t block_bytes = code_block_bytes(M, 4);
    for (int m = 0; m < M; ++m) {
        for (int d0 = 0; d0 < dsub; d0 += 4) {
            const int nd = std::min(4, dsub - d0);
            __m512 acc[NQ][4];
            for (int h = 0; h < NQ; ++h)
                for (int j = 0; j < 4; ++j) acc[h][j] = _mm512_setzero_ps();
            __m512 col[4];
            for (int j = 0; j < nd; ++j) col[j] = _mm512_loadu_ps(columns + (std::int64_t(m) * dsub + d0 + j) * 16);
            for (std::int64_t b = 0; b < n_blocks; ++b) {
                const __m512i c = load_row4(blocks + b * block_bytes + m * 16);
                const __m512i c_lo = _mm512_and_si512(c, low4), c_hi = _mm512_srli_epi32(c, 4);
                __m512 p_lo[NQ], p_hi[NQ];
                for (int h = 0; h < NQ; ++h) {
                    p_lo[h] = _mm512_loadu_ps(p + h * p_stride + b * 32);
                    p_hi[h] = _mm512_loadu_ps(p + h * p_stride + b * 32 + 16);
                }
                for (int j = 0; j < nd; ++j) {
                    const __m512 v_lo = _mm512_permutexvar_ps(c_lo, col[j]);
                    const __m512 v_hi = _mm512_permutexvar_ps(c_hi, col[j]);
                    for (int h = 0; h < NQ; ++h)
                        acc[h][j] = _mm512_fmadd_ps(p_hi[h], v_hi, _mm512_fmadd_ps(p_lo[h], v_lo, acc[h][j]));
                }
            }
            for (int h = 0; h < NQ; ++h)
                for (int j = 0; j < nd; ++j) out[std::int64_t(h) * D + m * dsub + d0 + j] += _mm512_reduce_add_ps(acc[h][j]);
        }
    }
}

// Split n_q heads into passes of at most kMaxHeads and call kernel<NQ> for each.
template <template <int> class K, class... Args>
void for_head_groups(int n_q, Args&&... args) {
    for (int h0 = 0; h0 < n_q; h0 += kMaxHeads) {
        const int nq = std::min(kMaxHeads, n_q - h0);
        switch (nq) {
            case 1: K<1>::run(h0, args...); break;
            case 2: K<2>::run(h0, args...); break;
            case 3: K<3>::run(h0, args...); break;
            case 4: K<4>::run(h0, args...); break;
            case 5: K<5>::run(h0, args...); break;
            case 6: K<6>::run(h0, args...); break;
            case 7: K<7>::run(h0, args...); break;
            default: K<8>::run(h0, args...); break;
        }
    }
}

template <int NQ>
struct ScanF32 {
    static void run(int h0, const float* lut, int M, const std::uint8_t* blocks, std::int64_t n_blocks, float* scores,
                    std::int64_t stride) {
        scan_f32_4bit<NQ>(lut + std::int64_t(h0) * M * 16, M, blocks, n_blocks, scores + h0 * stride, stride);
    }
};

template <int NQ>
struct ValuesPerm {
    static void run(int h0, const float* p, std::int64_t p_stride, int M, int dsub, const std::uint8_t* blocks,
                    std::int64_t n_blocks, const float* columns, float* out) {
        const int D = M * dsub;
        values_perm_heads<NQ>(p + h0 * p_stride, p_stride, M, dsub, blocks, n_blocks, columns,
                              out + std::int64_t(h0) * D, D);
    }
};

}  // namespace

void build_lut_avx512(const float* qy, int n_q, int M, int ksub, int dsub, const float* centroids, float* lut) {
    if (ksub % 16 != 0) return build_lut_ref(qy, n_q, M, ksub, dsub, centroids, lut);
    const int D = M * dsub;
    const __m512i lane = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(dsub));
    for (int m = 0; m < M; ++m)
        for (int c0 = 0; c0 < ksub; c0 += 16) {
            const float* cw = centroids + (std::int64_t(m) * ksub + c0) * dsub;
            for (int h0 = 0; h0 < n_q; h0 += kMaxHeads) {
                const int nq = std::min(kMaxHeads, n_q - h0);
                __m512 acc[kMaxHeads];
                for (int h = 0; h < nq; ++h) acc[h] = _mm512_setzero_ps();
                for (int d = 0; d < dsub; ++d) {
                    const __m512 col = _mm512_i32gather_ps(lane, cw + d, 4);  // centroids c0..c0+15, dim d
                    for (int h = 0; h < nq; ++h)
                        acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(qy[std::int64_t(h0 + h) * D + m * dsub + d]), col, acc[h]);
                }
                for (int h = 0; h < nq; ++h)
                    _mm512_storeu_ps(lut + (std::int64_t(h0 + h) * M + m) * ksub + c0, acc[h]);
            }
        }
}

void scan_f32_avx512(const float* lut, int n_q, int M, int nbits, const std::uint8_t* blocks, std::int64_t n_blocks,
                     float* scores, std::int64_t score_stride) {
    if (nbits == 8) return scan_f32_8bit(lut, n_q, M, blocks, n_blocks, scores, score_stride);
    for_head_groups<ScanF32>(n_q, lut, M, blocks, n_blocks, scores, score_stride);
}

void values_perm_avx512(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                        std::int64_t n_blocks, const float* columns, float* out) {
    for_head_groups<ValuesPerm>(n_q, p, p_stride, M, dsub, blocks, n_blocks, columns, out);
}

}  // namespace aqpim
