#pragma once
// k-means built for many tiny problems at once: the codebooks of a whole model are
// n_layers x n_kv_heads x {K,V} x M problems of 32-1024 points of dsub 2-32 dims, ksub 16 or 256
// centroids each. Problems are batched, trained independently (in parallel), deterministically
// for a seed whatever the thread count.

#include <cstdint>
#include <vector>

#include "aqpim/simd.h"

namespace aqpim {

enum class KMeansInit { kmeanspp, random };

/// Options of kmeans_batch (validated by kmeans_batch; bad values throw aqpim::Error).
struct KMeansParams {
    int k = 16;                 ///< centroids per problem (ksub), >= 1
    int max_iter = 25;          ///< Lloyd iterations at most, >= 0
    double tol = 1e-6;          ///< early stop when an iteration lowers the SSE by at most tol (relative);
                                ///< an assignment that changes nothing always stops
    std::uint64_t seed = 1234;  ///< problem p uses an RNG seeded from (seed, p)
    KMeansInit init = KMeansInit::kmeanspp;
    int seed_trials = 0;        ///< k-means++ draws per seed, the best kept (greedy), 0-8: 0 = 2 + ln k
                                ///< (scikit-learn's greedy default), 1 = plain k-means++ (measured:
                                ///< about as fast at k = 16, where its seeds need more Lloyd
                                ///< iterations, 1.4-1.7x faster at k = 256; SSE 1.6% / 10% higher)
    int n_threads = 0;          ///< 0 = default_threads()
};

/// Summary of a batched run.
struct KMeansStats {
    double total_sse = 0;            ///< sum over problems of weighted squared distances to the final centroids
    std::vector<double> sse;         ///< [n_problems]
    std::int64_t total_iterations = 0;  ///< Lloyd iterations summed over problems
    int max_iterations = 0;          ///< most iterations any problem took
    std::int64_t empty_repairs = 0;  ///< empty clusters re-seeded, summed over problems and iterations
};

/// Train n_problems independent k-means problems.
///   x         [n_problems][n_points][dim], row-major
///   weights   nullptr, or [n_problems][n_points] point weights (finite, >= 0, not all zero per problem)
///   centroids [n_problems][k][dim] output
/// Each problem: seeds by greedy weighted k-means++ (the best of seed_trials, by default 2 + ln k,
/// draws per seed, as scikit-learn) or k random distinct points, then Lloyd iterations (assignment, weighted means)
/// until an assignment repeats, an update gains less than tol, or max_iter updates. A cluster left
/// without weight is repaired by splitting the cluster of largest SSE (it takes that cluster's
/// farthest point). A point of weight 0 never moves a centroid; weight 2 counts as the point twice.
/// When n_points <= k the points themselves become centroids (centroid j = point j mod n_points;
/// SSE 0). Throws aqpim::Error on bad sizes, non-finite input or bad params, naming the value.
KMeansStats kmeans_batch(const KMeansParams& params, std::int64_t n_problems, int n_points, int dim,
                         const float* x, const float* weights, float* centroids);

// ---- nearest-centroid kernel (shared by k-means assignment and PQ encoding) ---------------------

/// For each of n points (point i at x + i * x_stride, dim floats), find the nearest of k centroids
/// ([k][dim], row-major, c_norms[j] = ||c_j||^2 precomputed). Writes idx[i] in [0, k) (ties: lowest
/// index) and, if dist != nullptr, dist[i] = squared distance (clamped >= 0).
struct NearestKernels {
    void (*nearest)(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                    const float* c_norms, int k, std::int32_t* idx, float* dist);
};
const NearestKernels& nearest_kernels(SimdLevel level);
/// Dispatched to the active level.
void nearest_centroid(const float* x, std::int64_t n, std::int64_t x_stride, int dim, const float* centroids,
                      const float* c_norms, int k, std::int32_t* idx, float* dist);

}  // namespace aqpim
