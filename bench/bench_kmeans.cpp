// k-means and encode micro-benchmarks (Google Benchmark), one thread:
//   BM_KMeans/<library>   aqpim kmeans_batch vs faiss k-means, same 1024 problems (2 layers x 8 KV
//                         heads x {K,V} x M=32 of 256 points, dsub 4, ksub 16), 25 iterations at most
//   BM_Encode/<level>/<nbits>  nearest-centroid encode of [n][128] rows, M=32 (dsub 4)
// items/s = problems or sub-vectors per second; bytes/s = input bytes read per second.

#include <benchmark/benchmark.h>
#include <omp.h>

#include <vector>

#include "../tools/kmeans_bench_data.h"
#include "aqpim/kmeans.h"
#include "aqpim/simd.h"

#ifdef AQPIM_HAVE_FAISS
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#endif

extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace {

using namespace aqpim;

constexpr int kLayers = 2, kHeads = 8, kTokens = 256, kD = 128, kDsub = 4, kM = kD / kDsub, kK = 16;
constexpr std::int64_t kProblems = std::int64_t(kLayers) * kHeads * 2 * kM;

/// [kProblems][kTokens][kDsub]
const std::vector<float>& problems() {
    static const std::vector<float> x = benchdata::subspace_problems(
        benchdata::kv_rows(kLayers, kHeads, kTokens, kD, 42), kLayers * kHeads * 2, kTokens, kD, kDsub);
    return x;
}

void set_counters(benchmark::State& state, double items, double bytes) {
    state.SetItemsProcessed(std::int64_t(items) * state.iterations());
    state.SetBytesProcessed(std::int64_t(bytes) * state.iterations());
}

void BM_KMeans_aqpim(benchmark::State& state) {
    const std::vector<float>& x = problems();
    std::vector<float> c(std::size_t(kProblems) * kK * kDsub);
    KMeansParams params;
    params.k = kK;
    params.n_threads = 1;
    KMeansStats st;
    for (auto _ : state) st = kmeans_batch(params, kProblems, kTokens, kDsub, x.data(), nullptr, c.data());
    state.counters["sse"] = st.total_sse;
    state.counters["mean_iter"] = double(st.total_iterations) / double(kProblems);
    set_counters(state, double(kProblems), double(x.size() * sizeof(float)));
}
BENCHMARK(BM_KMeans_aqpim)->Unit(benchmark::kMillisecond);

#ifdef AQPIM_HAVE_FAISS
void BM_KMeans_faiss(benchmark::State& state) {
    const std::vector<float>& x = problems();
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    omp_set_num_threads(1);
    double sse = 0;
    for (auto _ : state) {
        sse = 0;
        for (std::int64_t p = 0; p < kProblems; ++p) {
            faiss::ClusteringParameters cp;
            cp.niter = 25;
            cp.verbose = false;
            cp.seed = int(p);
            cp.min_points_per_centroid = 1;
            faiss::Clustering clus(kDsub, kK, cp);
            faiss::IndexFlatL2 index(kDsub);
            clus.train(kTokens, x.data() + p * kTokens * kDsub, index);
            sse += clus.iteration_stats.back().obj;
        }
    }
    state.counters["sse"] = sse;  // faiss's own objective (of the last assignment)
    set_counters(state, double(kProblems), double(x.size() * sizeof(float)));
}
BENCHMARK(BM_KMeans_faiss)->Unit(benchmark::kMillisecond);
#endif

void BM_Encode(benchmark::State& state) {
    const SimdLevel level = SimdLevel(state.range(0));
    const int nbits = int(state.range(1)), ksub = 1 << nbits;
    if (!cpu_supports(level)) {
        state.SkipWithError("SIMD level not supported by this CPU");
        return;
    }
    const int n = 16384, kChunk = 256;
    static const std::vector<float> base = benchdata::kv_rows(1, 8, 256, kD, 7);  // [4096][kD]
    std::vector<float> x(std::size_t(n) * kD);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = base[i % base.size()];
    std::vector<float> C(std::size_t(kM) * ksub * kDsub), cn(std::size_t(kM) * ksub);
    for (int m = 0; m < kM; ++m)  // codebooks: sub-vectors of the first ksub rows
        for (int j = 0; j < ksub; ++j) {
            float s = 0;
            for (int d = 0; d < kDsub; ++d) {
                float v = base[std::size_t(j) * kD + m * kDsub + d];
                C[(std::size_t(m) * ksub + j) * kDsub + d] = v;
                s += v * v;
            }
            cn[std::size_t(m) * ksub + j] = s;
        }
    std::vector<std::int32_t> idx(std::size_t(kM) * n);
    const auto nearest = nearest_kernels(level).nearest;
    for (auto _ : state) {
        for (int c0 = 0; c0 < n; c0 += kChunk)  // tokens in chunks that stay in cache over the M subspaces
            for (int m = 0; m < kM; ++m)
                nearest(x.data() + std::size_t(c0) * kD + m * kDsub, kChunk, kD, kDsub,
                        C.data() + std::size_t(m) * ksub * kDsub, cn.data() + std::size_t(m) * ksub, ksub,
                        idx.data() + std::size_t(m) * n + c0, nullptr);
        benchmark::DoNotOptimize(idx.data());
    }
    state.SetLabel(simd_level_name(level));
    set_counters(state, double(n) * kM, double(x.size() * sizeof(float)));
}
BENCHMARK(BM_Encode)->ArgsProduct({{0, 1, 2}, {4, 8}})->ArgNames({"level", "nbits"})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
