#pragma once
// Per-ISA kernels of kmeans_batch (src/pq/kmeans.cpp). They work on one problem in the internal
// layout kmeans.cpp builds for it:
//   xt  [dim][n_pad]  points centred on their weighted mean, structure of arrays; n_pad = n rounded
//                     up to kKMeansBlock, pad lanes 0
//   xn  [n_pad]       ||x_i||^2 (pad 0)
//   w   [n_pad]       point weights (pad 0)
//   c   [k][dim]      centroids, row-major; cn [k] = ||c_j||^2
//   xw  [n][dw]       rows (w_i x_i, w_i, 0...) summed by the Lloyd update; dw = 4, 8 or a
//                     multiple of 16, at least dim + 1
// Kernels never throw and never allocate (except a spill tile for dims they do not unroll).

#include <cstdint>

#include "aqpim/simd.h"

namespace aqpim {

/// Points per block of the SoA layout (one AVX-512 register of floats).
inline constexpr int kKMeansBlock = 16;
/// Most k-means++ candidates seed_dist takes at once.
inline constexpr int kMaxSeedCandidates = 8;

struct KMeansKernels {
    /// Lloyd assignment: idx[i] = nearest centroid of point i (ties: lowest index), i < n_pad;
    /// returns how many of the first n points changed index. Distances are ||c||^2 - 2 x.c; a
    /// kernel may resolve them only to ~2^-15 of max_i ||x_i||^2 + ||c||^2 (AVX-512 packs the
    /// index into the low mantissa bits).
    std::int64_t (*assign)(const float* xt, const float* xn, int n, int n_pad, int dim, const float* c, const float* cn,
                           int k, std::int32_t* idx);
    /// k-means++ candidates cand [n_cand][dim] (n_cand <= kMaxSeedCandidates), for each t and
    /// i < n_pad: d2_out[t][i] = min(d2_in[i], ||x_i - cand_t||^2) (no min if d2_in == nullptr),
    /// d2_out [n_cand][n_pad]; pot[t] = sum_i w_i d2_out[t][i]. Kernels may compute the squared
    /// distance as max(0, ||x||^2 + ||c||^2 - 2 x.c), xn [n_pad] = ||x_i||^2.
    void (*seed_dist)(const float* xt, const float* xn, const float* w, int n_pad, int dim, const float* cand,
                      int n_cand, const float* d2_in, float* d2_out, double* pot);
    /// k-means++ draws: for each target r[t] (ascending, in [0, sum_i w_i d2_i)), out[t] = the
    /// first point i whose running sum over points 0..i of w d2 passes r[t], so a point of potential
    /// 0 is never drawn (rounding past the end: the last point with potential). block_sums
    /// [n_pad / 16] is scratch.
    void (*sample)(const float* w, const float* d2, int n_pad, const double* r, int n_draws, float* block_sums,
                   int* out);
    /// Lloyd update sums: sums [k][dw] = sum over the points i < n with idx[i] = j of xw[i].
    void (*accumulate)(const float* xw, const std::int32_t* idx, int n, int dw, int k, float* sums);
    /// sum_i w_i ||x_i - c_idx[i]||^2 over i < n_pad, from differences (no cancellation).
    double (*exact_sse)(const float* xt, const float* w, int n_pad, int dim, const float* c, int k,
                        const std::int32_t* idx);
};

/// Kernels of a level (tests compare them with ref).
const KMeansKernels& kmeans_kernels(SimdLevel level);

#define AQPIM_KMEANS_KERNELS(isa)                                                                                 \
    std::int64_t kmeans_assign_##isa(const float* xt, const float* xn, int n, int n_pad, int dim, const float* c, \
                                     const float* cn, int k, std::int32_t* idx);                                  \
    void kmeans_seed_dist_##isa(const float* xt, const float* xn, const float* w, int n_pad, int dim,             \
                                const float* cand, int n_cand, const float* d2_in, float* d2_out, double* pot);   \
    void kmeans_sample_##isa(const float* w, const float* d2, int n_pad, const double* r, int n_draws,            \
                             float* block_sums, int* out);                                                        \
    void kmeans_accumulate_##isa(const float* xw, const std::int32_t* idx, int n, int dw, int k, float* sums);    \
    double kmeans_exact_sse_##isa(const float* xt, const float* w, int n_pad, int dim, const float* c, int k,     \
                                  const std::int32_t* idx);
AQPIM_KMEANS_KERNELS(ref)
AQPIM_KMEANS_KERNELS(avx2)
AQPIM_KMEANS_KERNELS(avx512)
#undef AQPIM_KMEANS_KERNELS

}  // namespace aqpim
