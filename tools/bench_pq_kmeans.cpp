// `aqpim bench pq` sections kmeans and encode: aqpim kmeans_batch against faiss k-means on the
// codebooks of a whole (synthetic) model, and nearest-centroid encode throughput per SIMD level
// against faiss ProductQuantizer::compute_codes. Both libraries run in the same process on the
// same inputs, at one thread (and at max_threads).

#include <omp.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "aqpim/kmeans.h"
#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "bench.h"
#include "kmeans_bench_data.h"

#ifdef AQPIM_HAVE_FAISS
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/impl/ProductQuantizer.h>
#endif

// faiss's BLAS (OpenBLAS) has its own threads; present when the linked BLAS is OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace aqpim::cli {
namespace {

using json = nlohmann::ordered_json;

constexpr int kIterations = 25;
constexpr const char* kNoFaiss = "faiss not available (built without AQPIM_HAVE_FAISS)";

template <class F>
double best_ms(int reps, F&& f) {
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < reps; ++r) {
        Timer t;
        f();
        best = std::min(best, t.ms());
    }
    return best;
}

/// OpenMP threads for the scope (faiss parallelises with OpenMP).
class OmpThreads {
public:
    explicit OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
    ~OmpThreads() { omp_set_num_threads(saved_); }

private:
    int saved_;
};

/// SSE of problems x [n_problems][n][dim] at their nearest of centroids [n_problems][k][dim], in
/// double: the same yardstick for both libraries.
double batch_sse(const float* x, const float* c, std::int64_t n_problems, int n, int dim, int k) {
    std::vector<double> sse(std::size_t(n_problems), 0.0);
    parallel_for(n_problems, [&](std::int64_t p) {
        const float* xp = x + p * n * dim;
        const float* cp = c + p * k * dim;
        double s = 0;
        for (int i = 0; i < n; ++i) {
            double best = std::numeric_limits<double>::infinity();
            for (int j = 0; j < k; ++j) {
                double d2 = 0;
                for (int d = 0; d < dim; ++d) {
                    double diff = double(xp[i * dim + d]) - cp[j * dim + d];
                    d2 += diff * diff;
                }
                best = std::min(best, d2);
            }
            s += best;
        }
        sse[p] = s;
    });
    double total = 0;
    for (double s : sse) total += s;
    return total;
}

#ifdef AQPIM_HAVE_FAISS
/// faiss k-means on each problem (Clustering + IndexFlatL2, kIterations, no subsampling), the
/// problems spread over `threads` threads and faiss itself at one thread.
void faiss_kmeans(const float* x, std::int64_t n_problems, int n, int dim, int k, std::uint64_t seed, int threads,
                  float* centroids) {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
    for (std::int64_t p = 0; p < n_problems; ++p) {
        omp_set_num_threads(1);
        faiss::ClusteringParameters cp;
        cp.niter = kIterations;
        cp.verbose = false;
        cp.seed = int(seed + std::uint64_t(p));
        cp.min_points_per_centroid = 1;        // no "too few points" warning
        cp.max_points_per_centroid = 1 << 20;  // no subsampling
        faiss::Clustering clus(dim, k, cp);
        faiss::IndexFlatL2 index(dim);
        clus.train(n, x + p * n * dim, index);
        std::copy(clus.centroids.begin(), clus.centroids.end(), centroids + p * k * dim);
    }
}
#endif

struct KMeansCase {
    std::string name;
    int n_layers, n_kv_head, n_tokens, D, dsub, nbits;
};

json kmeans_rows(const KMeansCase& kc, const BenchOptions& opt) {
    const int n_streams = kc.n_layers * kc.n_kv_head * 2, M = kc.D / kc.dsub, k = 1 << kc.nbits;
    const std::int64_t n_problems = std::int64_t(n_streams) * M;
    std::vector<float> x =
        benchdata::subspace_problems(benchdata::kv_rows(kc.n_layers, kc.n_kv_head, kc.n_tokens, kc.D, opt.seed),
                                     n_streams, kc.n_tokens, kc.D, kc.dsub);
    std::vector<float> c(std::size_t(n_problems) * k * kc.dsub);

    std::vector<int> thread_counts{1};
    if (opt.max_threads > 1) thread_counts.push_back(opt.max_threads);
    json rows = json::array();
    for (int threads : thread_counts) {
#ifdef AQPIM_HAVE_FAISS
        std::vector<float> cf(c.size());
        const double faiss_ms = best_ms(
            1, [&] { faiss_kmeans(x.data(), n_problems, kc.n_tokens, kc.dsub, k, opt.seed, threads, cf.data()); });
        const double faiss_sse = batch_sse(x.data(), cf.data(), n_problems, kc.n_tokens, kc.dsub, k);
#endif
        // greedy k-means++ (the default: best of 2 + ln k draws per seed) and plain k-means++
        for (int trials : {0, 1}) {
            KMeansParams params;
            params.k = k;
            params.max_iter = kIterations;
            params.seed = opt.seed;
            params.n_threads = threads;
            params.seed_trials = trials;
            KMeansStats stats;
            double aqpim_ms = best_ms(opt.quick ? 2 : 3, [&] {
                stats = kmeans_batch(params, n_problems, kc.n_tokens, kc.dsub, x.data(), nullptr, c.data());
            });
            double aqpim_sse = batch_sse(x.data(), c.data(), n_problems, kc.n_tokens, kc.dsub, k);
            json row = {{"section", "kmeans"},
                        {"case", kc.name},
                        {"seeding", trials == 0 ? "greedy k-means++" : "k-means++"},
                        {"threads", threads},
                        {"problems", n_problems},
                        {"iterations", kIterations},
                        {"aqpim_ms", aqpim_ms},
                        {"faiss_ms", nullptr},
                        {"speedup", nullptr},
                        {"aqpim_sse", aqpim_sse},
                        {"faiss_sse", nullptr},
                        {"sse_ratio", nullptr},
                        {"aqpim_mean_iter", double(stats.total_iterations) / double(n_problems)},
                        {"us_per_problem", aqpim_ms * 1e3 / double(n_problems)}};
#ifdef AQPIM_HAVE_FAISS
            row["faiss_ms"] = faiss_ms;
            row["speedup"] = faiss_ms / aqpim_ms;
            row["faiss_sse"] = faiss_sse;
            row["sse_ratio"] = aqpim_sse / faiss_sse;
#else
            row["note"] = kNoFaiss;
#endif
            rows.push_back(row);
        }
    }
    return rows;
}

}  // namespace

json bench_kmeans(const BenchOptions& opt) {
    std::vector<KMeansCase> cases;
    if (opt.quick) {
        cases = {{"1L x 8H x KV, M=32, 4-bit, 256 pts", 1, 8, 256, 128, 4, 4},
                 {"1L x 1H x KV, M=32, 8-bit, 512 pts", 1, 1, 512, 128, 4, 8}};
    } else {
        cases = {{"model 32L x 8H x KV, M=32, 4-bit, 256 pts", 32, 8, 256, 128, 4, 4},
                 {"8L x 8H x KV, M=16 (dsub 8), 4-bit, 256 pts", 8, 8, 256, 128, 8, 4},
                 {"1L x 8H x KV, M=32, 8-bit, 1024 pts", 1, 8, 1024, 128, 4, 8}};
    }
    json rows = json::array();
    for (const auto& kc : cases)
        for (auto& r : kmeans_rows(kc, opt)) rows.push_back(r);
    return rows;
}

json bench_encode(const BenchOptions& opt) {
    const int D = 128, dsub = 4, M = D / dsub, n_base = 4096;
    const std::int64_t n = opt.quick ? 8192 : 131072;  // tokens per pass: [n][D] read from memory
    const int reps = opt.quick ? 3 : 7;
    // x [n][D]: n_base synthetic KV rows, repeated
    std::vector<float> base = benchdata::kv_rows(1, n_base / 512, 256, D, opt.seed);
    std::vector<float> x(std::size_t(n) * D);
    for (std::int64_t t = 0; t < n; ++t)
        std::copy_n(base.data() + std::size_t(t % n_base) * D, D, x.data() + std::size_t(t) * D);
    std::vector<float> sub = benchdata::subspace_problems(base, 1, n_base, D, dsub);  // [M][n_base][dsub]

    json rows = json::array();
    const SimdLevel saved = active_simd_level();
    for (int nbits : {4, 8}) {
        const int ksub = 1 << nbits;
        // codebooks [M][ksub][dsub] trained on the base rows, norms [M][ksub]
        KMeansParams params;
        params.k = ksub;
        params.max_iter = 10;
        params.seed = opt.seed;
        std::vector<float> C(std::size_t(M) * ksub * dsub), cn(std::size_t(M) * ksub);
        kmeans_batch(params, M, n_base, dsub, sub.data(), nullptr, C.data());
        for (std::size_t j = 0; j < cn.size(); ++j) {
            float s = 0;
            for (int d = 0; d < dsub; ++d) s += C[j * dsub + d] * C[j * dsub + d];
            cn[j] = s;
        }
        std::vector<std::int32_t> idx(std::size_t(M) * n);  // [M][n]
        // codes of tokens [t0, t1) for every subspace, in chunks of tokens that stay in cache while
        // the M subspaces pass over them (as ProductQuantizer::encode does)
        auto encode = [&](std::int64_t t0, std::int64_t t1) {
            constexpr std::int64_t kChunk = 256;
            for (std::int64_t c0 = t0; c0 < t1; c0 += kChunk) {
                const std::int64_t nc = std::min(kChunk, t1 - c0);
                for (int m = 0; m < M; ++m)
                    nearest_centroid(x.data() + c0 * D + m * dsub, nc, D, dsub, C.data() + std::size_t(m) * ksub * dsub,
                                     cn.data() + std::size_t(m) * ksub, ksub, idx.data() + std::size_t(m) * n + c0,
                                     nullptr);
            }
        };
        const double subvecs = double(n) * M;
        auto row = [&](const char* simd, int threads, double ms) {
            double per_s = subvecs / (ms * 1e-3);
            return json{{"section", "encode"},
                        {"simd", simd},
                        {"nbits", nbits},
                        {"dsub", dsub},
                        {"threads", threads},
                        {"msubvec_per_s", per_s * 1e-6},
                        {"gbytes_per_s", per_s * dsub * sizeof(float) * 1e-9}};
        };
#ifdef AQPIM_HAVE_FAISS
        double faiss_ms = 0;
        {
            OmpThreads one(1);
            faiss::ProductQuantizer pq(D, M, nbits);
            std::copy(C.begin(), C.end(), pq.centroids.begin());  // both (M, ksub, dsub)
            std::vector<std::uint8_t> codes(pq.code_size * std::size_t(n));
            faiss_ms = best_ms(std::max(1, reps / 2), [&] { pq.compute_codes(x.data(), codes.data(), n); });
        }
#endif
        for (SimdLevel level : supported_simd_levels()) {
            set_simd_level(level);
            double ms = best_ms(level == SimdLevel::ref ? 1 : reps, [&] { encode(0, n); });
            json r = row(simd_level_name(level), 1, ms);
#ifdef AQPIM_HAVE_FAISS
            r["faiss_msubvec_per_s"] = subvecs / (faiss_ms * 1e-3) * 1e-6;
            r["speedup"] = faiss_ms / ms;
#else
            r["faiss_msubvec_per_s"] = nullptr;
            r["speedup"] = nullptr;
            r["note"] = kNoFaiss;
#endif
            rows.push_back(r);
        }
        set_simd_level(saved);
        if (opt.max_threads > 1) {
            const std::int64_t chunk = 4096;
            double ms = best_ms(reps, [&] {
                parallel_for((n + chunk - 1) / chunk,
                             [&](std::int64_t b) { encode(b * chunk, std::min(n, (b + 1) * chunk)); }, opt.max_threads);
            });
            rows.push_back(row(simd_level_name(saved), opt.max_threads, ms));
        }
    }
    return rows;
}

}  // namespace aqpim::cli
