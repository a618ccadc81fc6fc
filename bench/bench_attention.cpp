// Google Benchmark: GQA-group attention (4 query heads, D = 128) on PQ codes vs dense f16 and f32,
// in cache (one KV head reused) and cold (a rotating arena of 4 x LLC). Counters: tokens/s
// (per KV head) and bytes/s of KV read, so each row sits on a roofline.
//   build/bin/bench_attention --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "aqpim/attention.h"
#include "aqpim/bench_util.h"
#include "aqpim/pq.h"
#include "aqpim/pq_codes.h"
#include "aqpim/simd.h"

namespace {

using namespace aqpim;

constexpr int kD = 128, kGroup = 4;

std::vector<float> query() {
    std::vector<float> q(kGroup * kD);
    for (int i = 0; i < kGroup * kD; ++i) q[i] = std::sin(0.37f * i);
    return q;
}

ProductQuantizer trained_pq(int M, std::uint64_t seed) {
    PQParams p;
    p.D = kD;
    p.M = M;
    p.seed = seed;
    p.kmeans.max_iter = 4;
    ProductQuantizer pq(p);
    std::vector<float> x(std::size_t(512) * kD);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.001f * float(i * (seed + 3)));
    pq.train(x.data(), 512);
    return pq;
}

// One arena per (bytes per head, fill) so repeated benchmark runs do not refill it.
ColdArena& arena(std::size_t slot_bytes, ArenaFill fill = ArenaFill::bytes) {
    static std::map<std::pair<std::size_t, int>, std::unique_ptr<ColdArena>> arenas;
    auto& a = arenas[{slot_bytes, int(fill)}];
    if (!a) a = std::make_unique<ColdArena>(slot_bytes, cold_bytes(false), fill);
    return *a;
}

void report(benchmark::State& state, std::int64_t T, double bytes_per_head) {
    state.counters["tokens/s"] = benchmark::Counter(double(T) * state.iterations(), benchmark::Counter::kIsRate);
    state.counters["bytes/s"] = benchmark::Counter(bytes_per_head * state.iterations(), benchmark::Counter::kIsRate);
}

// args: T, cold (0/1). Elem is f16_t or float.
template <class Elem>
void BM_Dense(benchmark::State& state) {
    const std::int64_t T = state.range(0);
    const bool cold = state.range(1);
    const std::size_t bytes = std::size_t(T) * kD * 2 * sizeof(Elem);
    ColdArena& a = arena(bytes, sizeof(Elem) == 2 ? ArenaFill::f16 : ArenaFill::f32);
    const auto q = query();
    AttentionPartial part(kGroup, kD);
    Workspace ws;
    std::int64_t i = 0;
    for (auto _ : state) {
        auto* K = reinterpret_cast<Elem*>(a.slot(cold ? i++ : 0));
        part.reset(kGroup, kD);
        if constexpr (sizeof(Elem) == 2)
            attend_dense_f16(q.data(), kGroup, kD, K, K + T * kD, T, 0.088f, part, &ws);
        else
            attend_dense_f32(q.data(), kGroup, kD, K, K + T * kD, T, 0.088f, part, &ws);
        benchmark::DoNotOptimize(part.acc.data());
    }
    report(state, T, double(bytes));
}

// args: T, cold, M, int8 scores (0/1)
void BM_PqAttention(benchmark::State& state) {
    const std::int64_t T = state.range(0);
    const bool cold = state.range(1);
    const int M = int(state.range(2));
    PqAttentionOptions o;
    o.scores = state.range(3) ? PqScorePath::int8 : PqScorePath::f32;
    static std::map<int, std::pair<ProductQuantizer, ProductQuantizer>> pqs;
    if (!pqs.count(M)) pqs.emplace(M, std::make_pair(trained_pq(M, 1), trained_pq(M, 2)));
    const auto& [pk, pv] = pqs.at(M);
    const std::size_t code_bytes = std::size_t(code_blocks_for(T)) * code_block_bytes(M, 4);
    ColdArena& a = arena(2 * code_bytes);
    const auto q = query();
    AttentionPartial part(kGroup, kD);
    Workspace ws;
    std::int64_t i = 0;
    for (auto _ : state) {
        std::uint8_t* codes = a.slot(cold ? i++ : 0);
        part.reset(kGroup, kD);
        attend_pq(q.data(), kGroup, pk, pv, codes, codes + code_bytes, T, 0.088f, o, part, &ws);
        benchmark::DoNotOptimize(part.acc.data());
    }
    report(state, T, double(2 * code_bytes));
}

// The dense f16 kernels' two passes apart, in cache (4K tokens, tiles of 128 as attend_dense
// runs them): arg 0 = scores (K rows), 1 = values (V rows). Where the per-token time of the
// dense kernel goes; the softmax tile between them is the rest.
void BM_DenseF16Pass(benchmark::State& state) {
    constexpr std::int64_t T = 4096, kTile = 128;
    const bool values = state.range(0);
    ColdArena& a = arena(std::size_t(T) * kD * 2, ArenaFill::f16);
    const auto* rows = reinterpret_cast<const f16_t*>(a.slot(0));
    const auto q = query();
    std::vector<float> p(kGroup * kTile, 1.0f / kTile), acc(kGroup * kD, 0.0f);
    const AttnKernels& k = attn_kernels(active_simd_level());
    for (auto _ : state) {
        for (std::int64_t t0 = 0; t0 < T; t0 += kTile) {
            if (values)
                k.dense_values_f16(p.data(), kTile, kGroup, kD, rows + t0 * kD, kTile, acc.data());
            else
                k.dense_scores_f16(q.data(), kGroup, kD, rows + t0 * kD, kTile, p.data(), kTile);
        }
        benchmark::DoNotOptimize(acc.data());
        benchmark::DoNotOptimize(p.data());
    }
    report(state, T, double(T) * kD * 2);
}

void BM_ReadBandwidth(benchmark::State& state) {
    const std::size_t bytes = std::size_t(64) << 20;
    ColdArena& a = arena(bytes);
    std::int64_t i = 0;
    for (auto _ : state) benchmark::DoNotOptimize(read_bytes(a.slot(i++), bytes));
    state.counters["bytes/s"] = benchmark::Counter(double(bytes) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Dense<float>)->Name("BM_DenseF32")->ArgsProduct({{1024, 8192, 32768}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Dense<f16_t>)
    ->Name("BM_DenseF16")
    ->ArgsProduct({{1024, 8192, 32768, 131072}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DenseF16Pass)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PqAttention)
    ->ArgsProduct({{1024, 8192, 32768, 131072}, {0, 1}, {16, 32, 64}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
