// AVX2 (+FMA, F16C) attention kernels: softmax tiles and dense f32/f16 scores and values.
// Head dims that are not a multiple of 8 take the reference path.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attn/attn_kernels_isa.h"
#include "attn/vec_exp.h"
#include "simd/avx2_util.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"

namespace aqpim {

namespace {

// K and V rows are streams: as rows are consumed, prefetch_stream (simd/prefetch.h) asks for the
// bytes 2 KiB further on into L1 and 8 KiB further on into L2 (into the next tile, or past the end:
// prefetches never fault). The hardware prefetcher alone leaves a single core waiting on DRAM.

inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const f16_t* x) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))); }

// Lane L of the result = the full sum of a[L] (8 dot products reduced at once: 6 hadds, 2 lane
// permutes and an add, against about 5 uops per sum one at a time).
inline __m256 transpose_sum8(const __m256 (&a)[8]) {
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// scores for NQ in {1, 2, 4} heads, 8 / NQ rows per step: the step's 8 (row, head) dot products
// accumulate in 8 registers, each q chunk is loaded once per step, and one transpose_sum8 reduces
// them. Returns the rows done (a multiple of 8 / NQ).
template <int NQ, class T>
std::int64_t scores_heads_steps(const float* q, int D, const T* K, std::int64_t n_tok, float* scores, std::int64_t stride) {
    static_assert(NQ == 1 || NQ == 2 || NQ == 4);
    constexpr int kRows = 8 / NQ;
    std::int64_t t = 0;
    for (; t + kRows <= n_tok; t += kRows) {
        const T* k = K + t * D;
        prefetch_stream(k, sizeof(T) * kRows * D);
        __m256 acc[8];  // (row i, head h) in acc[h * kRows + i]
        for (__m256& a : acc) a = _mm256_setzero_ps();
        for (int d = 0; d < D; d += 8) {
            __m256 qv[NQ];
            for (int h = 0; h < NQ; ++h) qv[h] = _mm256_loadu_ps(q + h * D + d);
            for (int i = 0; i < kRows; ++i) {
                const __m256 x = load8(k + i * D + d);
                for (int h = 0; h < NQ; ++h) acc[h * kRows + i] = _mm256_fmadd_ps(qv[h], x, acc[h * kRows + i]);
            }
        }
        alignas(32) float sums[8];
        _mm256_store_ps(sums, transpose_sum8(acc));
        for (int h = 0; h < NQ; ++h)
            for (int i = 0; i < kRows; ++i) scores[h * stride + t + i] = sums[h * kRows + i];
    }
    return t;
}

template <int NQ, class T>
void scores_heads(const float* q, int D, const T* K, std::int64_t n_tok, float* scores, std::int64_t stride) {
    std::int64_t t0 = 0;
    if constexpr (NQ != 3) t0 = scores_heads_steps<NQ>(q, D, K, n_tok, scores, stride);
    for (std::int64_t t = t0; t < n_tok; ++t) {
        const T* k = K + t * D;
        prefetch_stream(k, sizeof(T) * D);
        __m256 acc[NQ];
        for (int h = 0; h < NQ; ++h) acc[h] = _mm256_setzero_ps();
        for (int d = 0; d < D; d += 8) {
            const __m256 kv = load8(k + d);
            for (int h = 0; h < NQ; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * D + d), kv, acc[h]);
        }
        for (int h = 0; h < NQ; ++h) scores[h * stride + t] = hsum(acc[h]);
    }
}

// NQ x NJ accumulators over one slice of 8 * NJ dims (NJ <= 3: with NQ = 4, 12 accumulators, the
// slice's 3 rows and the weight take the 16 ymm registers). NJ is a compile-time count: with a
// run-time one GCC kept the accumulators on the stack (GQA 4, D = 128, in cache: 28.6-30.9 ns per token against 17.5-18.2).
template <int NQ, int NJ, class T>
void values_slice(const float* p, std::int64_t stride, int D, int d0, const T* V, std::int64_t n_tok, float* acc_out) {
    __m256 acc[NQ][NJ];
    for (int h = 0; h < NQ; ++h)
        for (int j = 0; j < NJ; ++j) acc[h][j] = _mm256_setzero_ps();
    for (std::int64_t t = 0; t < n_tok; ++t) {
        const T* v = V + t * D + d0;
        if (d0 == 0) prefetch_stream(v, sizeof(T) * D);
        __m256 vv[NJ];
        for (int j = 0; j < NJ; ++j) vv[j] = load8(v + 8 * j);
        for (int h = 0; h < NQ; ++h) {
            const __m256 w = _mm256_broadcast_ss(p + h * stride + t);
            for (int j = 0; j < NJ; ++j) acc[h][j] = _mm256_fmadd_ps(w, vv[j], acc[h][j]);
        }
    }
    for (int h = 0; h < NQ; ++h)
        for (int j = 0; j < NJ; ++j) {
            float* o = acc_out + std::int64_t(h) * D + d0 + 8 * j;
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), acc[h][j]));
        }
}

template <int NQ, class T>
void values_heads(const float* p, std::int64_t stride, int D, const T* V, std::int64_t n_tok, float* acc_out) {
    for (int d0 = 0; d0 < D; d0 += 24)
        with_count<3>(std::min(3, (D - d0) / 8),
                      [&](auto NJ) { values_slice<NQ, NJ()>(p, stride, D, d0, V, n_tok, acc_out); });
}

template <class T>
void dense_scores(const float* q, int n_q, int D, const T* K, std::int64_t n_tok, float* scores, std::int64_t stride) {
    for_head_groups<4>(n_q, [&](auto NQ, int h0) {
        scores_heads<NQ()>(q + std::int64_t(h0) * D, D, K, n_tok, scores + h0 * stride, stride);
    });
}

template <class T>
void dense_values(const float* p, std::int64_t stride, int n_q, int D, const T* V, std::int64_t n_tok, float* acc) {
    for_head_groups<4>(n_q, [&](auto NQ, int h0) {
        values_heads<NQ()>(p + h0 * stride, stride, D, V, n_tok, acc + std::int64_t(h0) * D);
    });
}

}  // namespace

void softmax_tile_avx2(float* scores, std::int64_t stride, int n_q, std::int64_t n_valid, std::int64_t n_cols,
                       float* max, float* sum, float* alpha) {
    for (int h = 0; h < n_q; ++h) {
        float* s = scores + h * stride;
        float tile_max = -std::numeric_limits<float>::infinity();
        std::int64_t t = 0;
        __m256 vmax = _mm256_set1_ps(tile_max);
        for (; t + 8 <= n_valid; t += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + t));
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, vmax);
        for (float v : lanes) tile_max = std::fmax(tile_max, v);
        for (; t < n_valid; ++t) tile_max = std::fmax(tile_max, s[t]);
        const float new_max = std::fmax(max[h], tile_max);
        alpha[h] = max[h] == new_max ? 1.0f : std::exp(max[h] - new_max);
        const __m256 mx = _mm256_set1_ps(new_max);
        __m256 vsum = _mm256_setzero_ps();
        float tail_sum = 0;
        for (t = 0; t + 8 <= n_valid; t += 8) {
            const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + t), mx));
            vsum = _mm256_add_ps(vsum, e);
            _mm256_storeu_ps(s + t, e);
        }
        for (; t < n_valid; ++t) {
            s[t] = std::exp(s[t] - new_max);
            tail_sum += s[t];
        }
        for (; t < n_cols; ++t) s[t] = 0;
        sum[h] = sum[h] * alpha[h] + hsum(vsum) + tail_sum;
        max[h] = new_max;
    }
}

void dense_scores_f32_avx2(const float* q, int n_q, int D, const float* K, std::int64_t n_tok, float* scores,
                           std::int64_t stride) {
    if (D % 8) return dense_scores_f32_ref(q, n_q, D, K, n_tok, scores, stride);
    dense_scores(q, n_q, D, K, n_tok, scores, stride);
}
void dense_scores_f16_avx2(const float* q, int n_q, int D, const f16_t* K, std::int64_t n_tok, float* scores,
                           std::int64_t stride) {
    if (D % 8) return dense_scores_f16_ref(q, n_q, D, K, n_tok, scores, stride);
    dense_scores(q, n_q, D, K, n_tok, scores, stride);
}
void dense_values_f32_avx2(const float* p, std::int64_t stride, int n_q, int D, const float* V, std::int64_t n_tok,
                           float* acc) {
    if (D % 8) return dense_values_f32_ref(p, stride, n_q, D, V, n_tok, acc);
    dense_values(p, stride, n_q, D, V, n_tok, acc);
}
void dense_values_f16_avx2(const float* p, std::int64_t stride, int n_q, int D, const f16_t* V, std::int64_t n_tok,
                           float* acc) {
    if (D % 8) return dense_values_f16_ref(p, stride, n_q, D, V, n_tok, acc);
    dense_values(p, stride, n_q, D, V, n_tok, acc);
}

}  // namespace aqpim
