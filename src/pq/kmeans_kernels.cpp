// Scalar k-means kernels (the specification of the per-ISA ones) and their dispatch table.

#include <limits>

#include "pq/kmeans_kernels.h"

namespace aqpim {

std::int64_t kmeans_assign_ref(const float* xt, const float* xn, int n, int n_pad, int dim, const float* c,
                               const float* cn, int k, std::int32_t* idx) {
    std::int64_t changes = 0;
    for (int i = 0; i < n_pad; ++i) {
        float best = std::numeric_limits<float>::infinity();
        std::int32_t best_j = 0;
        for (int j = 0; j < k; ++j) {
            float dot = 0;
            for (int d = 0; d < dim; ++d) dot += xt[std::int64_t(d) * n_pad + i] * c[j * dim + d];
            float dj = cn[j] - 2 * dot;
            if (dj < best) {
                best = dj;
                best_j = j;
            }
        }
        if (i < n && idx[i] != best_j) ++changes;
        idx[i] = best_j;
    }
    return changes;
}

void kmeans_seed_dist_ref(const float* xt, const float* xn, const float* w, int n_pad, int dim, const float* cand,
                          int n_cand, const float* d2_in, float* d2_out, double* pot) {
    for (int t = 0; t < n_cand; ++t) {
        const float* c = cand + std::int64_t(t) * dim;
        float* out = d2_out + std::int64_t(t) * n_pad;
        double sum = 0;
        for (int i = 0; i < n_pad; ++i) {
            float d2 = 0;
            for (int d = 0; d < dim; ++d) {
                float diff = xt[std::int64_t(d) * n_pad + i] - c[d];
                d2 += diff * diff;
            }
            if (d2_in && d2_in[i] < d2) d2 = d2_in[i];
            out[i] = d2;
            sum += w[i] * d2;
        }
        pot[t] = sum;
    }
}

void kmeans_sample_ref(const float* w, const float* d2, int n_pad, const double* r, int n_draws, float* block_sums,
                       int* out) {
    double cum = 0;
    int t = 0, last = 0;
    for (int i = 0; i < n_pad && t < n_draws; ++i) {
        const float p = w[i] * d2[i];
        if (p > 0) last = i;
        cum += p;
        while (t < n_draws && r[t] < cum) out[t++] = i;
    }
    for (int i = n_pad - 1; t < n_draws && i > last; --i)  // rounding: the last point with potential
        if (w[i] * d2[i] > 0) last = i;
    while (t < n_draws) out[t++] = last;
}

double kmeans_exact_sse_ref(const float* xt, const float* w, int n_pad, int dim, const float* c, int k,
                            const std::int32_t* idx) {
    double sum = 0;
    for (int i = 0; i < n_pad; ++i) {
        const float* ci = c + std::int64_t(idx[i]) * dim;
        float d2 = 0;
        for (int d = 0; d < dim; ++d) {
            float diff = xt[std::int64_t(d) * n_pad + i] - ci[d];
            d2 += diff * diff;
        }
        sum += w[i] * d2;
    }
    return sum;
}

void kmeans_accumulate_ref(const float* xw, const std::int32_t* idx, int n, int dw, int k, float* sums) {
    for (std::int64_t e = 0; e < std::int64_t(k) * dw; ++e) sums[e] = 0;
    for (int i = 0; i < n; ++i)
        for (int d = 0; d < dw; ++d) sums[std::int64_t(idx[i]) * dw + d] += xw[std::int64_t(i) * dw + d];
}

namespace {
const KMeansKernels kTables[3] = {
    {kmeans_assign_ref, kmeans_seed_dist_ref, kmeans_sample_ref, kmeans_accumulate_ref, kmeans_exact_sse_ref},
    {kmeans_assign_avx2, kmeans_seed_dist_avx2, kmeans_sample_avx2, kmeans_accumulate_avx2, kmeans_exact_sse_avx2},
    {kmeans_assign_avx512, kmeans_seed_dist_avx512, kmeans_sample_avx512, kmeans_accumulate_avx512,
     kmeans_exact_sse_avx512},
};
}  // namespace

const KMeansKernels& kmeans_kernels(SimdLevel level) { return kTables[static_cast<int>(level)]; }

}  // namespace aqpim
