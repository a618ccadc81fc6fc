// kmeans_batch: many small weighted k-means problems. Each worker owns one Workspace, allocated
// once and reused by every problem it trains; a problem is copied into it (centred, SoA), seeded
// by greedy weighted k-means++, then refined by Lloyd iterations through the dispatched kernels.

#include "aqpim/kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/error.h"
#include "aqpim/threads.h"
#include "pq/kmeans_kernels.h"
#include "core/int_math.h"

namespace aqpim {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// Per-problem RNG: splitmix64 seeded from (seed, problem index), so results do not depend on
/// which thread trains which problem.
class Rng {
public:
    Rng(std::uint64_t seed, std::int64_t problem) {
        std::uint64_t p = std::uint64_t(problem);
        state_ = seed ^ splitmix64(p);
    }
    double uniform() { return double(splitmix64(state_) >> 11) * 0x1.0p-53; }  ///< [0, 1)
    int below(int n) { return std::min(n - 1, int(uniform() * n)); }           ///< [0, n)

private:
    std::uint64_t state_;
};

/// Floats per row of Workspace::xw: dim coordinates, the weight, zero padding to 4, 8 or 16k.
int row_width(int dim) { return dim < 4 ? 4 : dim < 8 ? 8 : (dim + 16) / 16 * 16; }

/// Scratch of one worker for problems of n points of dim dims and k centroids.
struct Workspace {
    Workspace(int n_, int dim_, int k_)
        : n(n_), n_pad(round_up(n_, kKMeansBlock)), dim(dim_), k(k_), dw(row_width(dim_)),
          xt(std::size_t(dim) * n_pad), xn(n_pad), w(n_pad), xw(std::size_t(n) * dw), idx(n_pad),
          c(std::size_t(k) * dim), cn(k), sums(std::size_t(k) * dw), d2(n_pad),
          d2_try(std::size_t(kMaxSeedCandidates) * n_pad), block_sums(n_pad / kKMeansBlock),
          cand(std::size_t(kMaxSeedCandidates) * dim), mean(dim), perm(n), empty(k), cluster_sse(k) {}

    int n, n_pad, dim, k, dw;
    double w_total = 0;               // sum_i w_i
    double wxn_total = 0;             // sum_i w_i ||x_i||^2 (centred)
    AlignedBuffer<float> xt;          // [dim][n_pad] centred points, SoA, pad lanes 0
    AlignedBuffer<float> xn;          // [n_pad] ||x_i||^2
    AlignedBuffer<float> w;           // [n_pad] weights, pad lanes 0
    AlignedBuffer<float> xw;          // [n][dw] rows (w_i x_i, w_i, 0...) summed by the update
    AlignedBuffer<std::int32_t> idx;  // [n_pad] assignment
    AlignedBuffer<float> c;           // [k][dim] centroids (centred)
    AlignedBuffer<float> cn;          // [k] ||c_j||^2
    AlignedBuffer<float> sums;        // [k][dw] per cluster (sum w x, sum w, 0...)
    AlignedBuffer<float> d2;          // [n_pad] seeding: squared distance to the nearest seed
    AlignedBuffer<float> d2_try;      // [kMaxSeedCandidates][n_pad] the same with one more candidate
    AlignedBuffer<float> block_sums;  // [n_pad / 16] seeding: scratch of the sampler
    std::vector<float> cand;          // [kMaxSeedCandidates][dim] seeding candidates
    std::vector<float> mean;          // [dim] weighted mean of the problem (the centring shift)
    std::vector<int> perm;            // [n] random init
    std::vector<int> empty;           // [k] clusters without weight
    std::vector<double> cluster_sse;  // [k] repair
};

/// The points x [n][dim] (DIM > 0: dim known at compile time) into ws, centred; ws.w loaded.
template <int DIM>
void load_points(Workspace& ws, const float* x) {
    const int n = ws.n, dim = DIM > 0 ? DIM : ws.dim, n_pad = ws.n_pad;
    float* xt = ws.xt.data();
    const float* w = ws.w.data();
    for (int i = 0; i < n; ++i)
        for (int d = 0; d < dim; ++d) xt[std::int64_t(d) * n_pad + i] = x[std::int64_t(i) * dim + d];
    float* xn = ws.xn.data();
    std::fill_n(xn, n_pad, 0.0f);
    for (int d = 0; d < dim; ++d) {
        float* row = xt + std::int64_t(d) * n_pad;
        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // n_pad is a multiple of 8, pad lanes 0
        for (int i = 0; i < n_pad; i += 8)
            for (int l = 0; l < 8; ++l) part[l] += w[i + l] * row[i + l];
        const double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        const float mean = float(sum / ws.w_total);
        ws.mean[d] = mean;
        for (int i = 0; i < n; ++i) row[i] -= mean;
        for (int i = 0; i < n_pad; ++i) xn[i] += row[i] * row[i];
    }
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // only its changes matter to the tol test: float will do
    for (int i = 0; i < n_pad; i += 8)
        for (int l = 0; l < 8; ++l) part[l] += w[i + l] * xn[i + l];
    ws.wxn_total = ((double(part[0]) + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    const int dw = ws.dw;
    for (int i = 0; i < n; ++i) {
        float* row = ws.xw.data() + std::int64_t(i) * dw;
        for (int d = 0; d < dim; ++d) row[d] = w[i] * (x[std::int64_t(i) * dim + d] - ws.mean[d]);
        row[dim] = w[i];
    }
}

bool all_finite(const float* x, std::int64_t n) {
    int bad = 0;
    for (std::int64_t e = 0; e < n; ++e) bad |= !(std::fabs(x[e]) <= std::numeric_limits<float>::max());
    return !bad;
}

/// Validate problem p (x [n][dim], weights [n] or nullptr) and copy it into ws, centred on its
/// weighted mean: a translation (undone on output) that keeps ||x||^2 + ||c||^2 - 2 x.c accurate.
void load(Workspace& ws, const float* x, const float* weights, std::int64_t p) {
    const int n = ws.n, dim = ws.dim;
    const std::int64_t n_x = std::int64_t(n) * dim;
    if (!all_finite(x, n_x))
        for (std::int64_t e = 0; e < n_x; ++e)
            AQPIM_CHECK(std::isfinite(x[e]), "kmeans_batch: x of problem {} point {} dim {} is {} (expected finite)", p,
                        e / dim, e % dim, x[e]);
    double w_total = n;
    if (weights) {
        double part[4] = {0, 0, 0, 0};
        for (int i = 0; i < n; ++i) {
            const float wi = weights[i];
            AQPIM_CHECK(wi >= 0 && wi <= std::numeric_limits<float>::max(),
                        "kmeans_batch: weight of problem {} point {} is {} (expected finite, >= 0)", p, i, wi);
            part[i % 4] += wi;
            ws.w[i] = wi;
        }
        w_total = (part[0] + part[1]) + (part[2] + part[3]);
        AQPIM_CHECK(w_total > 0, "kmeans_batch: weights of problem {} sum to {} (expected > 0: not all zero)", p,
                    w_total);
    } else {
        std::fill_n(ws.w.data(), n, 1.0f);
    }
    ws.w_total = w_total;
    switch (dim) {  // the common sub-vector sizes unrolled
        case 2: return load_points<2>(ws, x);
        case 4: return load_points<4>(ws, x);
        case 8: return load_points<8>(ws, x);
        default: return load_points<0>(ws, x);
    }
}

void copy_point(const Workspace& ws, int i, float* out) {
    for (int d = 0; d < ws.dim; ++d) out[d] = ws.xt[std::int64_t(d) * ws.n_pad + i];
}

/// A point drawn with probability w_i / sum(w).
int sample_by_weight(const Workspace& ws, Rng& rng) {
    double r = rng.uniform() * ws.w_total;
    int last = 0;
    for (int i = 0; i < ws.n; ++i) {
        if (ws.w[i] <= 0) continue;
        last = i;
        if (r < ws.w[i]) return i;
        r -= ws.w[i];
    }
    return last;  // rounding
}

/// n_draws (<= kMaxSeedCandidates) points drawn with probability w_i d2_i / total.
void sample_by_potential(Workspace& ws, const KMeansKernels& K, const float* d2, double total, Rng& rng, int n_draws,
                         int* out) {
    double r[kMaxSeedCandidates];  // targets, ascending (insertion sort)
    for (int t = 0; t < n_draws; ++t) {
        double v = rng.uniform() * total;
        int u = t;
        for (; u > 0 && r[u - 1] > v; --u) r[u] = r[u - 1];
        r[u] = v;
    }
    K.sample(ws.w.data(), d2, ws.n_pad, r, n_draws, ws.block_sums.data(), out);
}

/// Greedy weighted k-means++ (as scikit-learn): each new seed is the best of `trials` (0: 2 + ln k)
/// draws with probability proportional to w_i d2_i, judged by the potential sum_i w_i d2_i it leaves.
void seed_kmeanspp(Workspace& ws, const KMeansKernels& K, Rng& rng, int trials) {
    const int n_trials = trials > 0 ? trials : std::min(kMaxSeedCandidates, 2 + int(std::log(double(ws.k))));
    const int dim = ws.dim, n_pad = ws.n_pad;
    copy_point(ws, sample_by_weight(ws, rng), ws.c.data());
    double total = 0;
    K.seed_dist(ws.xt.data(), ws.xn.data(), ws.w.data(), n_pad, dim, ws.c.data(), 1, nullptr, ws.d2.data(), &total);
    for (int j = 1; j < ws.k; ++j) {
        float* cj = ws.c.data() + std::int64_t(j) * dim;
        if (!(total > 0)) {  // every point sits on a seed: duplicate one
            copy_point(ws, sample_by_weight(ws, rng), cj);
            continue;
        }
        int drawn[kMaxSeedCandidates];
        sample_by_potential(ws, K, ws.d2.data(), total, rng, n_trials, drawn);
        int n_cand = 0;
        for (int t = 0; t < n_trials; ++t)  // distinct draws (repeats are adjacent)
            if (t == 0 || drawn[t] != drawn[t - 1]) {
                drawn[n_cand] = drawn[t];
                copy_point(ws, drawn[t], ws.cand.data() + std::int64_t(n_cand) * dim);
                ++n_cand;
            }
        double pot[kMaxSeedCandidates];
        K.seed_dist(ws.xt.data(), ws.xn.data(), ws.w.data(), n_pad, dim, ws.cand.data(), n_cand, ws.d2.data(),
                    ws.d2_try.data(), pot);
        const int best = int(std::min_element(pot, pot + n_cand) - pot);
        std::copy_n(ws.cand.data() + std::int64_t(best) * dim, dim, cj);
        std::copy_n(ws.d2_try.data() + std::int64_t(best) * n_pad, n_pad, ws.d2.data());
        total = pot[best];
    }
}

/// k distinct points with positive weight, uniformly (duplicates only if there are fewer).
void seed_random(Workspace& ws, Rng& rng) {
    int m = 0;
    for (int i = 0; i < ws.n; ++i)
        if (ws.w[i] > 0) ws.perm[m++] = i;
    for (int j = 0; j < ws.k; ++j) {
        if (j < m) std::swap(ws.perm[j], ws.perm[j + rng.below(m - j)]);
        copy_point(ws, ws.perm[j % m], ws.c.data() + std::int64_t(j) * ws.dim);
    }
}

/// Lloyd update: centroids = weighted means of their clusters. Returns the number of clusters
/// without weight, listed in ws.empty (their centroids are left as they were).
int update_centroids(Workspace& ws, const KMeansKernels& K) {
    K.accumulate(ws.xw.data(), ws.idx.data(), ws.n, ws.dw, ws.k, ws.sums.data());
    const int dim = ws.dim;
    int n_empty = 0;
    for (int j = 0; j < ws.k; ++j) {
        const float* s = ws.sums.data() + std::int64_t(j) * ws.dw;
        const float wj = s[dim];
        if (!(wj > 0)) {
            ws.empty[n_empty++] = j;
            continue;
        }
        const float inv = 1.0f / wj;
        float* cj = ws.c.data() + std::int64_t(j) * dim;
        for (int d = 0; d < dim; ++d) cj[d] = s[d] * inv;
    }
    return n_empty;
}

/// share [n] = w_i ||x_i - c_idx[i]||^2 and ws.cluster_sse [k] = their sums per cluster, computed
/// from differences (exact, unlike the kernels' ||x||^2 + ||c||^2 - 2 x.c). Returns the total.
double cluster_shares(Workspace& ws, float* share) {
    std::fill(ws.cluster_sse.begin(), ws.cluster_sse.end(), 0.0);
    double total = 0;
    for (int i = 0; i < ws.n; ++i) {
        const float* cj = ws.c.data() + std::int64_t(ws.idx[i]) * ws.dim;
        float d2 = 0;
        for (int d = 0; d < ws.dim; ++d) {
            float diff = ws.xt[std::int64_t(d) * ws.n_pad + i] - cj[d];
            d2 += diff * diff;
        }
        share[i] = ws.w[i] * d2;
        ws.cluster_sse[ws.idx[i]] += share[i];
        total += share[i];
    }
    return total;
}

/// Empty-cluster repair: each empty cluster takes the member farthest (largest w_i d2_i) from
/// the centroid of the cluster with the largest SSE, splitting that cluster. Deterministic, and
/// each repair lowers the SSE by at least that member's share.
void repair_empty(Workspace& ws, int n_empty) {
    float* share = ws.d2_try.data();
    cluster_shares(ws, share);
    for (int e = 0; e < n_empty; ++e) {
        float* ce = ws.c.data() + std::int64_t(ws.empty[e]) * ws.dim;
        for (;;) {
            int big = int(std::max_element(ws.cluster_sse.begin(), ws.cluster_sse.end()) - ws.cluster_sse.begin());
            if (!(ws.cluster_sse[big] > 0)) {  // every cluster is a single location: duplicate one
                std::copy_n(ws.c.data() + std::int64_t(ws.idx[0]) * ws.dim, ws.dim, ce);
                break;
            }
            int far = -1;
            for (int i = 0; i < ws.n; ++i)
                if (ws.idx[i] == big && share[i] > 0 && (far < 0 || share[i] > share[far])) far = i;
            if (far < 0) {  // only rounding residue was left
                ws.cluster_sse[big] = 0;
                continue;
            }
            copy_point(ws, far, ce);
            ws.cluster_sse[big] -= share[far];
            share[far] = 0;
            break;
        }
    }
}

void centroid_norms(Workspace& ws) {
    const int dim = ws.dim;
    for (int j = 0; j < ws.k; ++j) {
        const float* cj = ws.c.data() + std::int64_t(j) * dim;
        float s[4] = {0, 0, 0, 0};  // four chains
        int d = 0;
        for (; d + 4 <= dim; d += 4)
            for (int l = 0; l < 4; ++l) s[l] += cj[d + l] * cj[d + l];
        for (; d < dim; ++d) s[0] += cj[d] * cj[d];
        ws.cn[j] = (s[0] + s[1]) + (s[2] + s[3]);
    }
}

struct ProblemStats {
    double sse = 0;
    int iterations = 0;
    std::int64_t repairs = 0;
};

/// SSE of the centroids just updated from the assignment: sum_i w_i ||x_i||^2 - sum_j W_j ||c_j||^2
/// (exact for centroids that are their cluster's mean; repaired clusters had no weight).
double updated_sse(const Workspace& ws) {
    double s = ws.wxn_total;
    for (int j = 0; j < ws.k; ++j) s -= double(ws.sums[std::size_t(j) * ws.dw + ws.dim]) * ws.cn[j];
    return s;
}

/// Seed and refine the problem loaded in ws; ws.c holds the centred centroids on return.
ProblemStats train_one(const KMeansParams& params, const KMeansKernels& K, Workspace& ws, Rng& rng) {
    if (params.init == KMeansInit::kmeanspp)
        seed_kmeanspp(ws, K, rng, params.seed_trials);
    else
        seed_random(ws, rng);
    centroid_norms(ws);
    std::fill(ws.idx.begin(), ws.idx.end(), -1);
    ProblemStats st;
    double sse_prev = 0;
    bool small_gain = false;
    for (;;) {
        // assignment to the current centroids; stop if it is the previous one (a fixed point), after
        // max_iter updates, or after an update that gained less than tol (idx then matches ws.c)
        const std::int64_t changes = K.assign(ws.xt.data(), ws.xn.data(), ws.n, ws.n_pad, ws.dim, ws.c.data(),
                                              ws.cn.data(), ws.k, ws.idx.data());
        if (changes == 0 || st.iterations == params.max_iter || small_gain) break;
        if (int n_empty = update_centroids(ws, K)) {
            repair_empty(ws, n_empty);
            st.repairs += n_empty;
        }
        centroid_norms(ws);
        ++st.iterations;
        const double sse = updated_sse(ws);
        small_gain = st.iterations > 1 && sse_prev - sse <= params.tol * sse_prev;
        sse_prev = sse;
    }
    st.sse = K.exact_sse(ws.xt.data(), ws.w.data(), ws.n_pad, ws.dim, ws.c.data(), ws.k, ws.idx.data());
    return st;
}

void validate(const KMeansParams& params, std::int64_t n_problems, int n_points, int dim) {
    AQPIM_CHECK(params.k >= 1, "kmeans_batch: k = {} (expected >= 1)", params.k);
    AQPIM_CHECK(params.max_iter >= 0, "kmeans_batch: max_iter = {} (expected >= 0)", params.max_iter);
    AQPIM_CHECK(std::isfinite(params.tol) && params.tol >= 0, "kmeans_batch: tol = {} (expected finite, >= 0)",
                params.tol);
    AQPIM_CHECK(params.init == KMeansInit::kmeanspp || params.init == KMeansInit::random,
                "kmeans_batch: init = {} (expected kmeanspp or random)", int(params.init));
    AQPIM_CHECK(params.seed_trials >= 0 && params.seed_trials <= kMaxSeedCandidates,
                "kmeans_batch: seed_trials = {} (expected 0-{}; 0 = 2 + ln k)", params.seed_trials, kMaxSeedCandidates);
    AQPIM_CHECK(params.n_threads >= 0, "kmeans_batch: n_threads = {} (expected >= 0; 0 = default)", params.n_threads);
    AQPIM_CHECK(n_problems >= 0, "kmeans_batch: n_problems = {} (expected >= 0)", n_problems);
    AQPIM_CHECK(n_points >= 1, "kmeans_batch: n_points = {} (expected >= 1)", n_points);
    AQPIM_CHECK(dim >= 1, "kmeans_batch: dim = {} (expected >= 1)", dim);
}

}  // namespace

KMeansStats kmeans_batch(const KMeansParams& params, std::int64_t n_problems, int n_points, int dim, const float* x,
                         const float* weights, float* centroids) {
    validate(params, n_problems, n_points, dim);
    KMeansStats stats;
    stats.sse.assign(std::size_t(n_problems), 0.0);
    if (n_problems == 0) return stats;
    AQPIM_CHECK(x != nullptr && centroids != nullptr, "kmeans_batch: x and centroids must not be null");

    const KMeansKernels& K = kmeans_kernels(active_simd_level());
    const int k = params.k;
    const int n_threads = params.n_threads > 0 ? params.n_threads : default_threads();
    const std::int64_t n_chunks = std::min<std::int64_t>(n_threads, n_problems);
    std::vector<int> iterations(std::size_t(n_problems), 0);
    std::vector<std::int64_t> repairs(std::size_t(n_problems), 0);

    // One contiguous range of problems per worker, one Workspace per range.
    parallel_for(
        n_chunks,
        [&](std::int64_t chunk) {
            Workspace ws(n_points, dim, k);
            const std::int64_t p_begin = n_problems * chunk / n_chunks, p_end = n_problems * (chunk + 1) / n_chunks;
            for (std::int64_t p = p_begin; p < p_end; ++p) {
                const float* xp = x + p * n_points * dim;
                float* out = centroids + p * k * dim;
                load(ws, xp, weights ? weights + p * n_points : nullptr, p);
                if (p + 1 < p_end)  // the next problem's points, while this one trains
                    for (std::int64_t b = 0; b < std::int64_t(n_points) * dim * 4; b += 64)
                        __builtin_prefetch(reinterpret_cast<const char*>(xp + std::int64_t(n_points) * dim) + b);
                if (n_points <= k) {  // the points are the centroids
                    for (int j = 0; j < k; ++j)
                        std::copy_n(xp + std::int64_t(j % n_points) * dim, dim, out + std::int64_t(j) * dim);
                    continue;
                }
                Rng rng(params.seed, p);
                ProblemStats st = train_one(params, K, ws, rng);
                for (int j = 0; j < k; ++j)
                    for (int d = 0; d < dim; ++d)
                        out[std::int64_t(j) * dim + d] = ws.c[std::int64_t(j) * dim + d] + ws.mean[d];
                stats.sse[p] = st.sse;
                iterations[p] = st.iterations;
                repairs[p] = st.repairs;
            }
        },
        int(n_chunks));

    for (std::int64_t p = 0; p < n_problems; ++p) {
        stats.total_sse += stats.sse[p];
        stats.total_iterations += iterations[p];
        stats.max_iterations = std::max(stats.max_iterations, iterations[p]);
        stats.empty_repairs += repairs[p];
    }
    return stats;
}

}  // namespace aqpim
