// k-means kernels, AVX-512: blocks of 16 points of the SoA layout (see pq/kmeans_kernels.h).

#include <algorithm>
#include <cstring>

#include "aqpim/aligned.h"
#include "pq/kmeans_kernels.h"
#include "simd/static_dispatch.h"
#include "pq/nearest_block_avx512.h"

namespace aqpim {
namespace {

/// acc + the 16 lanes of v, in double (sums over many blocks keep their precision).
inline __m512d widen_add(__m512d acc, __m512 v) {
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    __m512 high = _mm512_shuffle_f32x4(v, v, 0xee);  // lanes 8..15 moved down
    return _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(high)));
}

/// Largest k the packed assignment handles (the index takes the 8 low mantissa bits).
constexpr int kMaxPackedK = 256;

/// j at position j: broadcast from memory into vpternlogd.
struct LaneIndex {
    alignas(64) std::int32_t j[kMaxPackedK];
    constexpr LaneIndex() : j() {
        for (int i = 0; i < kMaxPackedK; ++i) j[i] = i;
    }
};
constexpr LaneIndex kLaneIndex;

/// Lloyd assignment with the index packed into the distance: d'_j = (||c_j||^2 + B) - 2 x.c_j,
/// B = max_i ||x_i||^2, is >= 0 up to rounding, so its float bits order as signed integers (a
/// rounding-negative one still wins, as it should); with the low `bits` mantissa bits replaced by
/// j, one integer min per centroid keeps distance and index (ties: lowest j). 6 instructions per
/// 16 points and centroid at dim 4 instead of 7.
template <int DIM>
std::int64_t assign_packed(const float* xt, const float* xn, int n, int n_pad, int dim_rt, const float* c,
                           const float* cn, int k, std::int32_t* idx) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    avx512::PointTile<avx512::kUnrolledDim<DIM> ? DIM : 0> tile;
    __m512* xm2 = tile.get(dim);

    __m512 xn_max = _mm512_setzero_ps();
    for (int b = 0; b < n_pad; b += kKMeansBlock) xn_max = _mm512_max_ps(xn_max, _mm512_loadu_ps(xn + b));
    const float B = _mm512_reduce_max_ps(xn_max);
    alignas(64) float cnb[kMaxPackedK];  // ||c_j||^2 + B
    for (int j = 0; j < k; ++j) cnb[j] = cn[j] + B;
    const int bits = k <= 16 ? 4 : 8;
    const __m512i low = _mm512_set1_epi32((1 << bits) - 1), high = _mm512_set1_epi32(~((1 << bits) - 1));

    const __m512 minus2 = _mm512_set1_ps(-2.0f);
    std::int64_t changes = 0;
    for (int b = 0; b < n_pad; b += kKMeansBlock) {
        for (int d = 0; d < dim; ++d) xm2[d] = _mm512_mul_ps(_mm512_loadu_ps(xt + std::int64_t(d) * n_pad + b), minus2);
        __m512i best = _mm512_set1_epi32(0x7fffffff);
        for (int j = 0; j < k; ++j) {
            const float* cj = c + std::int64_t(j) * dim;
            __m512 acc = _mm512_set1_ps(cnb[j]);
            for (int d = 0; d < dim; ++d) acc = _mm512_fmadd_ps(xm2[d], _mm512_set1_ps(cj[d]), acc);
            // (acc & high) | j
            __m512i packed =
                _mm512_ternarylogic_epi32(_mm512_castps_si512(acc), high, _mm512_set1_epi32(kLaneIndex.j[j]), 0xea);
            best = _mm512_min_epi32(best, packed);
        }
        const __m512i new_idx = _mm512_and_si512(best, low);
        const __m512i old = _mm512_loadu_si512(idx + b);
        _mm512_storeu_si512(idx + b, new_idx);
        changes += __builtin_popcount(_mm512_mask_cmpneq_epi32_mask(avx512::lanes_below(n - b), old, new_idx));
    }
    return changes;
}

/// Exact Lloyd assignment (nearest16), for k > kMaxPackedK.
template <int DIM>
std::int64_t assign_exact(const float* xt, int n, int n_pad, int dim_rt, const float* c, const float* cn, int k,
                          std::int32_t* idx) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    avx512::PointTile<avx512::kUnrolledDim<DIM> ? DIM : 0> tile;
    __m512* xm2 = tile.get(dim);

    const __m512 minus2 = _mm512_set1_ps(-2.0f);
    std::int64_t changes = 0;
    for (int b = 0; b < n_pad; b += kKMeansBlock) {
        for (int d = 0; d < dim; ++d) xm2[d] = _mm512_mul_ps(_mm512_loadu_ps(xt + std::int64_t(d) * n_pad + b), minus2);
        avx512::Nearest16 r = avx512::nearest16<DIM>(xm2, dim, c, cn, k);
        __m512i old = _mm512_loadu_si512(idx + b);
        _mm512_storeu_si512(idx + b, r.idx);
        changes += __builtin_popcount(_mm512_mask_cmpneq_epi32_mask(avx512::lanes_below(n - b), old, r.idx));
    }
    return changes;
}

template <int DIM>
std::int64_t assign_impl(const float* xt, const float* xn, int n, int n_pad, int dim, const float* c, const float* cn,
                         int k, std::int32_t* idx) {
    if (k <= kMaxPackedK) return assign_packed<DIM>(xt, xn, n, n_pad, dim, c, cn, k, idx);
    return assign_exact<DIM>(xt, n, n_pad, dim, c, cn, k, idx);
}

/// NC k-means++ candidates cand [NC][DIM] in one pass over the points (each block's x, ||x||^2,
/// weights and d2_in loaded once, the NC potentials in independent chains): d2_out[t] = min(d2_in,
/// ||x - c_t||^2), pot[t] = sum w d2_out[t]. ||x||^2 + ||c||^2 - 2 x.c (clamped at 0): DIM + 4
/// instructions per 16 points and candidate instead of 2 DIM + 2; the points are centred, so the
/// rounding stays ~1e-7 of their spread.
template <int DIM, int NC>
void seed_dist_unrolled(const float* xt, const float* xn, const float* w, int n_pad, const float* cand,
                        const float* d2_in, float* d2_out, double* pot) {
    float m2c[NC][DIM], cn[NC];  // -2 c, ||c||^2
    for (int t = 0; t < NC; ++t) {
        cn[t] = 0;
        for (int d = 0; d < DIM; ++d) {
            m2c[t][d] = -2.0f * cand[t * DIM + d];
            cn[t] += cand[t * DIM + d] * cand[t * DIM + d];
        }
    }
    __m512 pots[NC];
    for (int t = 0; t < NC; ++t) pots[t] = _mm512_setzero_ps();
    for (int b = 0; b < n_pad; b += kKMeansBlock) {
        __m512 x[DIM];
        for (int d = 0; d < DIM; ++d) x[d] = _mm512_loadu_ps(xt + std::int64_t(d) * n_pad + b);
        const __m512 xnb = _mm512_loadu_ps(xn + b), wb = _mm512_loadu_ps(w + b);
        const __m512 d2b = d2_in ? _mm512_loadu_ps(d2_in + b) : _mm512_setzero_ps();
        for (int t = 0; t < NC; ++t) {
            __m512 acc = _mm512_add_ps(xnb, _mm512_set1_ps(cn[t]));
            for (int d = 0; d < DIM; ++d) acc = _mm512_fmadd_ps(x[d], _mm512_set1_ps(m2c[t][d]), acc);
            acc = _mm512_max_ps(acc, _mm512_setzero_ps());
            if (d2_in) acc = _mm512_min_ps(d2b, acc);
            _mm512_storeu_ps(d2_out + std::int64_t(t) * n_pad + b, acc);
            pots[t] = _mm512_fmadd_ps(wb, acc, pots[t]);
        }
    }
    for (int t = 0; t < NC; ++t) pot[t] = avx512::hsum(widen_add(_mm512_setzero_pd(), pots[t]));
}

/// One candidate c [dim] of a dim the kernels do not unroll, from differences: d2_out = min(d2_in,
/// ||x - c||^2); returns sum w d2_out.
double seed_dist_any_dim(const float* xt, const float* w, int n_pad, int dim, const float* c, const float* d2_in,
                         float* d2_out) {
    __m512 pot = _mm512_setzero_ps();
    for (int b = 0; b < n_pad; b += kKMeansBlock) {
        __m512 acc = _mm512_setzero_ps();
        for (int d = 0; d < dim; ++d) {
            __m512 diff = _mm512_sub_ps(_mm512_loadu_ps(xt + std::int64_t(d) * n_pad + b), _mm512_set1_ps(c[d]));
            acc = _mm512_fmadd_ps(diff, diff, acc);
        }
        if (d2_in) acc = _mm512_min_ps(_mm512_loadu_ps(d2_in + b), acc);
        _mm512_storeu_ps(d2_out + b, acc);
        pot = _mm512_fmadd_ps(_mm512_loadu_ps(w + b), acc, pot);
    }
    return avx512::hsum(widen_add(_mm512_setzero_pd(), pot));
}

}  // namespace

std::int64_t kmeans_assign_avx512(const float* xt, const float* xn, int n, int n_pad, int dim, const float* c,
                                  const float* cn, int k, std::int32_t* idx) {
    return with_constant<1, 2, 3, 4, 5, 6, 7, 8, 16>(
        dim, [&](auto DIM) { return assign_impl<DIM()>(xt, xn, n, n_pad, dim, c, cn, k, idx); });
}

void kmeans_seed_dist_avx512(const float* xt, const float* xn, const float* w, int n_pad, int dim, const float* cand,
                             int n_cand, const float* d2_in, float* d2_out, double* pot) {
    if (n_cand < 1) return;  // with_count needs at least one
    with_constant<2, 4, 8>(dim, [&](auto DIM) {
        if constexpr (DIM() > 0) {
            with_count<kMaxSeedCandidates>(n_cand, [&](auto NC) {
                seed_dist_unrolled<DIM(), NC()>(xt, xn, w, n_pad, cand, d2_in, d2_out, pot);
            });
        } else {
            for (int t = 0; t < n_cand; ++t)
                pot[t] = seed_dist_any_dim(xt, w, n_pad, dim, cand + std::int64_t(t) * dim, d2_in,
                                           d2_out + std::int64_t(t) * n_pad);
        }
    });
}

void kmeans_sample_avx512(const float* w, const float* d2, int n_pad, const double* r, int n_draws, float* block_sums,
                          int* out) {
    // block_sums[b] = running sum of w d2 over blocks 0..b (prefix sums 16 blocks at a time)
    const int n_blocks = n_pad / kKMeansBlock;
    alignas(64) float sums[kKMeansBlock];
    __m512 carry = _mm512_setzero_ps();
    for (int g = 0; g < n_blocks; g += kKMeansBlock) {
        const int m = std::min(kKMeansBlock, n_blocks - g);
        for (int q = 0; q < kKMeansBlock; ++q)
            sums[q] = q < m ? avx512::hsum(_mm512_mul_ps(_mm512_loadu_ps(w + (g + q) * kKMeansBlock),
                                                         _mm512_loadu_ps(d2 + (g + q) * kKMeansBlock)))
                            : 0.0f;
        const __m512 prefix = _mm512_add_ps(avx512::prefix16(_mm512_load_ps(sums)), carry);
        _mm512_mask_storeu_ps(block_sums + g, avx512::lanes_below(m), prefix);
        carry = _mm512_permutexvar_ps(_mm512_set1_epi32(15), prefix);
    }
    const float total = block_sums[n_blocks - 1];
    for (int t = 0; t < n_draws; ++t) {
        const float rt = std::min(float(r[t]), total);
        int b = 0;  // blocks whose running sum is <= rt: the block of the target
        for (int g = 0; g < n_blocks; g += kKMeansBlock) {
            const __mmask16 valid = avx512::lanes_below(n_blocks - g);  // block_sums holds n_blocks
            b += __builtin_popcount(_mm512_mask_cmp_ps_mask(valid, _mm512_maskz_loadu_ps(valid, block_sums + g),
                                                            _mm512_set1_ps(rt), _CMP_LE_OQ));
        }
        if (b == n_blocks)  // rounding: the last block with potential
            for (b = n_blocks - 1; b > 0 && !(block_sums[b] > block_sums[b - 1]); --b) {
            }
        const int i0 = b * kKMeansBlock;
        const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(w + i0), _mm512_loadu_ps(d2 + i0));
        const float before = b > 0 ? block_sums[b - 1] : 0.0f;
        const unsigned passed = _mm512_cmp_ps_mask(_mm512_set1_ps(rt - before), avx512::prefix16(p), _CMP_LT_OQ);
        // the first point whose prefix passes the target (prefixes grow only at points with
        // potential); none (rounding): the block's last point with potential
        const unsigned positive = _mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_GT_OQ);
        out[t] = i0 + (passed ? __builtin_ctz(passed) : 31 - __builtin_clz(positive));
    }
}

double kmeans_exact_sse_avx512(const float* xt, const float* w, int n_pad, int dim, const float* c, int k,
                               const std::int32_t* idx) {
    constexpr int kMaxPermuteDim = 32;
    __m512d sum = _mm512_setzero_pd();
    if (k <= 16 && dim <= kMaxPermuteDim) {  // coordinate d of every centroid in one register
        __m512 ct[kMaxPermuteDim];
        const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(dim));
        const __mmask16 valid = avx512::lanes_below(k);
        for (int d = 0; d < dim; ++d) ct[d] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, rows, c + d, 4);
        for (int b = 0; b < n_pad; b += kKMeansBlock) {
            const __m512i vi = _mm512_loadu_si512(idx + b);
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < dim; ++d) {
                __m512 diff =
                    _mm512_sub_ps(_mm512_loadu_ps(xt + std::int64_t(d) * n_pad + b), _mm512_permutexvar_ps(vi, ct[d]));
                acc = _mm512_fmadd_ps(diff, diff, acc);
            }
            sum = widen_add(sum, _mm512_mul_ps(_mm512_loadu_ps(w + b), acc));
        }
    } else {
        for (int b = 0; b < n_pad; b += kKMeansBlock) {
            const __m512i rows = _mm512_mullo_epi32(_mm512_loadu_si512(idx + b), _mm512_set1_epi32(dim));
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < dim; ++d) {
                __m512 diff = _mm512_sub_ps(_mm512_loadu_ps(xt + std::int64_t(d) * n_pad + b),
                                            _mm512_i32gather_ps(rows, c + d, 4));
                acc = _mm512_fmadd_ps(diff, diff, acc);
            }
            sum = widen_add(sum, _mm512_mul_ps(_mm512_loadu_ps(w + b), acc));
        }
    }
    return avx512::hsum(sum);
}

void kmeans_accumulate_avx512(const float* xw, const std::int32_t* idx, int n, int dw, int k, float* sums) {
    // Rows of even points go to sums, of odd points to a second table (when it fits the stack):
    // two read-modify-write chains per cluster instead of one.
    constexpr int kStackFloats = 4096;
    alignas(64) float odd_sums[kStackFloats];
    const std::size_t n_floats = std::size_t(k) * dw;
    float* odd = n_floats <= std::size_t(kStackFloats) ? odd_sums : sums;
    std::memset(sums, 0, n_floats * sizeof(float));
    if (odd != sums) std::memset(odd, 0, n_floats * sizeof(float));
    auto add_rows = [&](auto add) {
        int i = 0;
        for (; i + 2 <= n; i += 2) {
            add(sums + std::int64_t(idx[i]) * dw, xw + std::int64_t(i) * dw);
            add(odd + std::int64_t(idx[i + 1]) * dw, xw + std::int64_t(i + 1) * dw);
        }
        if (i < n) add(sums + std::int64_t(idx[i]) * dw, xw + std::int64_t(i) * dw);
    };
    if (dw == 4) {
        add_rows([](float* s, const float* row) { _mm_storeu_ps(s, _mm_add_ps(_mm_loadu_ps(s), _mm_loadu_ps(row))); });
    } else if (dw == 8) {
        add_rows([](float* s, const float* row) {
            _mm256_storeu_ps(s, _mm256_add_ps(_mm256_loadu_ps(s), _mm256_loadu_ps(row)));
        });
    } else {
        add_rows([dw](float* s, const float* row) {
            for (int d = 0; d < dw; d += 16)
                _mm512_storeu_ps(s + d, _mm512_add_ps(_mm512_loadu_ps(s + d), _mm512_loadu_ps(row + d)));
        });
    }
    if (odd != sums)
        for (std::size_t e = 0; e < n_floats; ++e) sums[e] += odd[e];
}

}  // namespace aqpim
