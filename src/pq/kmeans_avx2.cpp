// k-means kernels, AVX2: each 16-point block of the SoA layout (see pq/kmeans_kernels.h) as two
// halves of 8.

#include <cstring>

#include "aqpim/aligned.h"
#include "pq/kmeans_kernels.h"
#include "simd/static_dispatch.h"
#include "pq/nearest_block_avx2.h"

namespace aqpim {
namespace {

template <int DIM>
std::int64_t assign_impl(const float* xt, int n, int n_pad, int dim_rt, const float* c, const float* cn, int k,
                         std::int32_t* idx) {
    const int dim = DIM > 0 ? DIM : dim_rt;
    avx2::PointTile<avx2::kUnrolledDim<DIM> ? DIM : 0> tile;
    __m256* xm2 = tile.get(dim);

    const __m256 minus2 = _mm256_set1_ps(-2.0f);
    std::int64_t changes = 0;
    for (int b = 0; b < n_pad; b += 8) {
        for (int d = 0; d < dim; ++d) xm2[d] = _mm256_mul_ps(_mm256_loadu_ps(xt + std::int64_t(d) * n_pad + b), minus2);
        avx2::Nearest8 r = avx2::nearest8<DIM>(xm2, dim, c, cn, k);
        __m256i old = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + b));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + b), r.idx);
        __m256i same = _mm256_cmpeq_epi32(old, r.idx);
        __m256i changed = _mm256_andnot_si256(same, avx2::lanes_below(n - b));
        changes += __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(changed)));
    }
    return changes;
}

}  // namespace

std::int64_t kmeans_assign_avx2(const float* xt, const float* xn, int n, int n_pad, int dim, const float* c,
                                const float* cn, int k, std::int32_t* idx) {
    return with_constant<1, 2, 3, 4, 5, 6, 7, 8>(
        dim, [&](auto DIM) { return assign_impl<DIM()>(xt, n, n_pad, dim, c, cn, k, idx); });
}

void kmeans_seed_dist_avx2(const float* xt, const float* xn, const float* w, int n_pad, int dim, const float* cand,
                           int n_cand, const float* d2_in, float* d2_out, double* pot) {
    for (int t = 0; t < n_cand; ++t) {
        const float* c = cand + std::int64_t(t) * dim;
        float* out = d2_out + std::int64_t(t) * n_pad;
        __m256 acc_pot = _mm256_setzero_ps();
        for (int i = 0; i < n_pad; i += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int d = 0; d < dim; ++d) {
                __m256 diff =
                    _mm256_sub_ps(_mm256_loadu_ps(xt + std::int64_t(d) * n_pad + i), _mm256_broadcast_ss(c + d));
                acc = _mm256_fmadd_ps(diff, diff, acc);
            }
            if (d2_in) acc = _mm256_min_ps(_mm256_loadu_ps(d2_in + i), acc);
            _mm256_storeu_ps(out + i, acc);
            acc_pot = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), acc, acc_pot);
        }
        pot[t] = avx2::hsum(avx2::widen_add(_mm256_setzero_pd(), acc_pot));
    }
}

void kmeans_sample_avx2(const float* w, const float* d2, int n_pad, const double* r, int n_draws, float* block_sums,
                        int* out) {
    const int n_blocks = n_pad / kKMeansBlock;
    for (int b = 0; b < n_blocks; ++b) {
        const int i = b * kKMeansBlock;
        __m256 p = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(d2 + i)),
                                 _mm256_mul_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(d2 + i + 8)));
        block_sums[b] = avx2::hsum(p);
    }
    double cum = 0;
    int t = 0;
    for (int b = 0; b < n_blocks && t < n_draws; ++b) {
        const double next = cum + block_sums[b];
        if (r[t] < next) {  // targets in this block: prefix sums of its 16 potentials
            const int i0 = b * kKMeansBlock;
            __m256 p[2], s[2];
            for (int h = 0; h < 2; ++h) {
                p[h] = _mm256_mul_ps(_mm256_loadu_ps(w + i0 + 8 * h), _mm256_loadu_ps(d2 + i0 + 8 * h));
                s[h] = avx2::prefix8(p[h]);
            }
            s[1] = _mm256_add_ps(s[1], _mm256_permutevar8x32_ps(s[0], _mm256_set1_epi32(7)));
            const int positive = _mm256_movemask_ps(_mm256_cmp_ps(p[0], _mm256_setzero_ps(), _CMP_GT_OQ)) |
                                 _mm256_movemask_ps(_mm256_cmp_ps(p[1], _mm256_setzero_ps(), _CMP_GT_OQ)) << 8;
            do {
                const __m256 rv = _mm256_set1_ps(float(r[t] - cum));
                const int passed = _mm256_movemask_ps(_mm256_cmp_ps(rv, s[0], _CMP_LT_OQ)) |
                                   _mm256_movemask_ps(_mm256_cmp_ps(rv, s[1], _CMP_LT_OQ)) << 8;
                // the first point whose prefix passes the target (prefixes grow only at points with
                // potential); none (rounding): the block's last point with potential
                out[t++] = i0 + (passed ? __builtin_ctz(unsigned(passed)) : 31 - __builtin_clz(unsigned(positive)));
            } while (t < n_draws && r[t] < next);
        }
        cum = next;
    }
    if (t < n_draws) {  // rounding left targets past the end: the last point with potential
        int i = n_pad - 1;
        while (i > 0 && !(w[i] * d2[i] > 0)) --i;
        while (t < n_draws) out[t++] = i;
    }
}

double kmeans_exact_sse_avx2(const float* xt, const float* w, int n_pad, int dim, const float* c, int k,
                             const std::int32_t* idx) {
    __m256d sum = _mm256_setzero_pd();
    for (int i = 0; i < n_pad; i += 8) {
        const __m256i rows =
            _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + i)), _mm256_set1_epi32(dim));
        __m256 acc = _mm256_setzero_ps();
        for (int d = 0; d < dim; ++d) {
            __m256 diff =
                _mm256_sub_ps(_mm256_loadu_ps(xt + std::int64_t(d) * n_pad + i), _mm256_i32gather_ps(c + d, rows, 4));
            acc = _mm256_fmadd_ps(diff, diff, acc);
        }
        sum = avx2::widen_add(sum, _mm256_mul_ps(_mm256_loadu_ps(w + i), acc));
    }
    return avx2::hsum(sum);
}

void kmeans_accumulate_avx2(const float* xw, const std::int32_t* idx, int n, int dw, int k, float* sums) {
    std::memset(sums, 0, std::size_t(k) * dw * sizeof(float));
    if (dw == 4) {
        for (int i = 0; i < n; ++i) {
            float* s = sums + std::int64_t(idx[i]) * 4;
            _mm_storeu_ps(s, _mm_add_ps(_mm_loadu_ps(s), _mm_loadu_ps(xw + std::int64_t(i) * 4)));
        }
    } else {
        for (int i = 0; i < n; ++i) {
            float* s = sums + std::int64_t(idx[i]) * dw;
            const float* row = xw + std::int64_t(i) * dw;
            for (int d = 0; d < dw; d += 8)
                _mm256_storeu_ps(s + d, _mm256_add_ps(_mm256_loadu_ps(s + d), _mm256_loadu_ps(row + d)));
        }
    }
}

}  // namespace aqpim
