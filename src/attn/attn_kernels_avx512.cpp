// AVX-512 attention kernels: softmax tiles and dense f32/f16 scores and values.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attn/attn_kernels_isa.h"
#include "attn/vec_exp.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"
#include "simd/avx512_util.h"

namespace aqpim {

namespace {

inline __mmask16 tail_mask(std::int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// K and V rows are streams: as rows are consumed, prefetch_stream (simd/prefetch.h) asks for the
// bytes 2 KiB further on into L1 and 8 KiB further on into L2 (into the next tile, or past the end:
// prefetches never fault). The hardware prefetcher alone leaves a single core waiting on DRAM.

// Lanes [4h, 4h + 4) of v, h in [0, 4): the extract's lane index must be an immediate (clang
// rejects a loop variable when the loop is not unrolled, as at -O0/-O1).
inline __m128 lane_quarter(__m512 v, int h) {
    switch (h) {
        case 0: return _mm512_castps512_ps128(v);
        case 1: return _mm512_extractf32x4_ps(v, 1);
        case 2: return _mm512_extractf32x4_ps(v, 2);
        default: return _mm512_extractf32x4_ps(v, 3);
    }
}

inline __m512 load16(const float* x, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x); }
inline __m512 load16(const f16_t* x, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x)); }
// Unmasked: the f16 form folds into one memory-operand vcvtph2ps (1 ALU uop), where the masked
// form costs a zero-masking load (a p05 uop) and a register vcvtph2ps (2 uops): 3x the ALU work
// of the conversion, a third of the dense f16 kernel's uops.
inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const f16_t* x) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))); }

// scores for NQ in {1, 2, 4} heads and D = 16 * CHUNKS, 16 / NQ rows per step: the step's 16
// (row, head) dot products accumulate in 16 registers, each q chunk is loaded once per step and
// serves 16 / NQ rows (with two rows per load the q loads, not the FMAs, bound the GQA-4 pass),
// each row is converted once, and one transpose_sum16 reduces all 16 sums (3 uops per sum instead
// of about 8). Returns the rows done (a multiple of 16 / NQ).
template <int NQ, int CHUNKS, class T>
std::int64_t scores_heads_steps(const float* q, const T* K, std::int64_t n_tok, float* scores, std::int64_t stride) {
    static_assert(NQ == 1 || NQ == 2 || NQ == 4);
    constexpr int D = 16 * CHUNKS, kRows = 16 / NQ;
    std::int64_t t = 0;
    for (; t + kRows <= n_tok; t += kRows) {
        const T* k = K + t * D;
        prefetch_stream(k, sizeof(T) * kRows * D);
        __m512 acc[16];  // sum of (row i, head h) goes to output lane L = h * kRows + i
#pragma GCC unroll 16
        for (int c = 0; c < CHUNKS; ++c) {
            __m512 qv[NQ];
            for (int h = 0; h < NQ; ++h) qv[h] = _mm512_loadu_ps(q + h * D + 16 * c);
            for (int i = 0; i < kRows; ++i) {
                const __m512 x = load16(k + i * D + 16 * c);
                for (int h = 0; h < NQ; ++h) {
                    const int lane = h * kRows + i;
                    __m512& a = acc[4 * (lane % 4) + lane / 4];
                    a = c == 0 ? _mm512_mul_ps(qv[h], x) : _mm512_fmadd_ps(qv[h], x, a);
                }
            }
        }
        const __m512 sums = transpose_sum16(acc);
        for (int h = 0; h < NQ; ++h) {
            float* out = scores + h * stride + t;
            if constexpr (kRows == 16)
                _mm512_storeu_ps(out, sums);
            else if constexpr (kRows == 8)
                _mm256_storeu_ps(out, h == 0 ? _mm512_castps512_ps256(sums) : _mm512_extractf32x8_ps(sums, 1));
            else
                _mm_storeu_ps(out, lane_quarter(sums, h));
        }
    }
    return t;
}

// scores for NQ <= 4 heads: one pass over the K rows, each row converted once. CHUNKS > 0 fixes
// D = 16 * CHUNKS at compile time (unmasked, fully unrolled) and runs whole steps of
// scores_heads_steps where NQ allows; the rest goes two rows per iteration (sharing every load of
// q, the 2 x 4 sums reduced together). CHUNKS == 0 handles any D.
template <int NQ, int CHUNKS, class T>
void scores_heads(const float* q, int D, const T* K, std::int64_t n_tok, float* scores, std::int64_t stride) {
    if constexpr (CHUNKS > 0) D = 16 * CHUNKS;
    const int n_chunks = (D + 15) / 16;
    std::int64_t t = 0;
    if constexpr (CHUNKS > 0 && NQ != 3) t = scores_heads_steps<NQ, CHUNKS>(q, K, n_tok, scores, stride);
    for (; t + 2 <= n_tok; t += 2) {
        const T* k0 = K + t * D;
        const T* k1 = k0 + D;
        prefetch_stream(k0, sizeof(T) * 2 * D);
        __m512 a0[NQ], a1[NQ];
        for (int h = 0; h < NQ; ++h) a0[h] = a1[h] = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int c = 0; c < (CHUNKS > 0 ? CHUNKS : n_chunks); ++c) {
            const int d = 16 * c;
            const __mmask16 m = CHUNKS > 0 ? __mmask16(0xffff) : tail_mask(D - d);
            const __m512 x0 = CHUNKS > 0 ? load16(k0 + d) : load16(k0 + d, m);
            const __m512 x1 = CHUNKS > 0 ? load16(k1 + d) : load16(k1 + d, m);
            for (int h = 0; h < NQ; ++h) {
                const __m512 qv = CHUNKS > 0 ? _mm512_loadu_ps(q + h * D + d) : _mm512_maskz_loadu_ps(m, q + h * D + d);
                a0[h] = _mm512_fmadd_ps(qv, x0, a0[h]);
                a1[h] = _mm512_fmadd_ps(qv, x1, a1[h]);
            }
        }
        if constexpr (NQ == 4) {
            alignas(16) float s0[4], s1[4];
            _mm_store_ps(s0, reduce4(a0[0], a0[1], a0[2], a0[3]));
            _mm_store_ps(s1, reduce4(a1[0], a1[1], a1[2], a1[3]));
            for (int h = 0; h < 4; ++h) {
                scores[h * stride + t] = s0[h];
                scores[h * stride + t + 1] = s1[h];
            }
        } else {
            for (int h = 0; h < NQ; ++h) {
                scores[h * stride + t] = _mm512_reduce_add_ps(a0[h]);
                scores[h * stride + t + 1] = _mm512_reduce_add_ps(a1[h]);
            }
        }
    }
    for (; t < n_tok; ++t) {
        const T* k = K + t * D;
        __m512 acc[NQ];
        for (int h = 0; h < NQ; ++h) acc[h] = _mm512_setzero_ps();
        for (int d = 0; d < D; d += 16) {
            const __mmask16 m = tail_mask(D - d);
            const __m512 kv = load16(k + d, m);
            for (int h = 0; h < NQ; ++h) acc[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + h * D + d), kv, acc[h]);
        }
        for (int h = 0; h < NQ; ++h) scores[h * stride + t] = _mm512_reduce_add_ps(acc[h]);
    }
}

template <int NQ, class T>
void scores_heads_any_d(const float* q, int D, const T* K, std::int64_t n_tok, float* scores, std::int64_t stride) {
    with_constant<64, 128, 256>(D, [&](auto DV) { scores_heads<NQ, DV() / 16>(q, D, K, n_tok, scores, stride); });
}

// values for NQ <= 4 heads, one 64-dim slice at a time: NQ x 4 accumulators stay in registers while
// rows stream by. Where D is a multiple of 64 (FULL: no masks) and above 64, the rows go in chunks
// of kValueChunkRows, every slice of a chunk before the next chunk, so the V stream is read at an
// even rate: slice after slice over a whole tile, the later slices ran on rows already in cache
// while nothing was fetched (cold, 68-71% of the read roof against 76-80% chunked). A slice's
// accumulators are acc_out itself, loaded and stored per chunk: load/store ports only, and
// unmasked, because a masked store does not forward to the next load.
constexpr std::int64_t kValueChunkRows = 8;
template <int NQ, bool FULL, class T>
void values_heads(const float* p, std::int64_t stride, int D, const T* V, std::int64_t n_tok, float* acc_out) {
    const std::int64_t chunk = FULL && D > 64 ? kValueChunkRows : std::max<std::int64_t>(n_tok, 1);
    for (std::int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const std::int64_t t1 = std::min(n_tok, t0 + chunk);
        for (int d0 = 0; d0 < D; d0 += 64) {
            __m512 acc[NQ][4];
            __mmask16 mk[4];
            for (int j = 0; j < 4; ++j) mk[j] = d0 + 16 * j < D ? tail_mask(D - d0 - 16 * j) : __mmask16(0);
            auto out = [&](int h, int j) { return acc_out + std::int64_t(h) * D + d0 + 16 * j; };
            for (int h = 0; h < NQ; ++h)
                for (int j = 0; j < 4; ++j)
                    acc[h][j] = FULL ? _mm512_loadu_ps(out(h, j)) : _mm512_maskz_loadu_ps(mk[j], out(h, j));
            for (std::int64_t t = t0; t < t1; ++t) {
                const T* v = V + t * D + d0;
                if (d0 == 0) prefetch_stream(v, sizeof(T) * D);
                __m512 vv[4];
                for (int j = 0; j < 4; ++j) vv[j] = FULL ? load16(v + 16 * j) : load16(v + 16 * j, mk[j]);
                for (int h = 0; h < NQ; ++h) {
                    const __m512 w = _mm512_set1_ps(p[h * stride + t]);
                    for (int j = 0; j < 4; ++j) acc[h][j] = _mm512_fmadd_ps(w, vv[j], acc[h][j]);
                }
            }
            for (int h = 0; h < NQ; ++h)
                for (int j = 0; j < 4; ++j) {
                    if (FULL)
                        _mm512_storeu_ps(out(h, j), acc[h][j]);
                    else
                        _mm512_mask_storeu_ps(out(h, j), mk[j], acc[h][j]);
                }
        }
    }
}

template <class T>
void dense_scores(const float* q, int n_q, int D, const T* K, std::int64_t n_tok, float* scores, std::int64_t stride) {
    for_head_groups<4>(n_q, [&](auto NQ, int h0) {
        scores_heads_any_d<NQ()>(q + std::int64_t(h0) * D, D, K, n_tok, scores + h0 * stride, stride);
    });
}

template <class T>
void dense_values(const float* p, std::int64_t stride, int n_q, int D, const T* V, std::int64_t n_tok, float* acc) {
    for_head_groups<4>(n_q, [&](auto NQ, int h0) {
        if (D % 64 == 0)
            values_heads<NQ(), true>(p + h0 * stride, stride, D, V, n_tok, acc + std::int64_t(h0) * D);
        else
            values_heads<NQ(), false>(p + h0 * stride, stride, D, V, n_tok, acc + std::int64_t(h0) * D);
    });
}

}  // namespace

void softmax_tile_avx512(float* scores, std::int64_t stride, int n_q, std::int64_t n_valid, std::int64_t n_cols,
                         float* max, float* sum, float* alpha) {
    for (int h = 0; h < n_q; ++h) {
        float* s = scores + h * stride;
        __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        for (std::int64_t t = 0; t < n_valid; t += 16)
            vmax = _mm512_mask_max_ps(vmax, tail_mask(n_valid - t), vmax, _mm512_maskz_loadu_ps(tail_mask(n_valid - t), s + t));
        const float new_max = std::fmax(max[h], _mm512_reduce_max_ps(vmax));
        alpha[h] = max[h] == new_max ? 1.0f : std::exp(max[h] - new_max);
        const __m512 mx = _mm512_set1_ps(new_max);
        __m512 vsum = _mm512_setzero_ps();
        for (std::int64_t t = 0; t < n_cols; t += 16) {
            const __mmask16 valid = t < n_valid ? tail_mask(n_valid - t) : __mmask16(0);
            const __m512 e = _mm512_maskz_mov_ps(valid, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(valid, s + t), mx)));
            vsum = _mm512_add_ps(vsum, e);
            _mm512_mask_storeu_ps(s + t, tail_mask(n_cols - t), e);
        }
        sum[h] = sum[h] * alpha[h] + _mm512_reduce_add_ps(vsum);
        max[h] = new_max;
    }
}

void dense_scores_f32_avx512(const float* q, int n_q, int D, const float* K, std::int64_t n_tok, float* scores,
                             std::int64_t stride) {
    dense_scores(q, n_q, D, K, n_tok, scores, stride);
}
void dense_scores_f16_avx512(const float* q, int n_q, int D, const f16_t* K, std::int64_t n_tok, float* scores,
                             std::int64_t stride) {
    dense_scores(q, n_q, D, K, n_tok, scores, stride);
}
void dense_values_f32_avx512(const float* p, std::int64_t stride, int n_q, int D, const float* V, std::int64_t n_tok,
                             float* acc) {
    dense_values(p, stride, n_q, D, V, n_tok, acc);
}
void dense_values_f16_avx512(const float* p, std::int64_t stride, int n_q, int D, const f16_t* V, std::int64_t n_tok,
                             float* acc) {
    dense_values(p, stride, n_q, D, V, n_tok, acc);
}

}  // namespace aqpim
