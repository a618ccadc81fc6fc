// Google Benchmark: one decode step's attention through KvCache::attend for every --kv scheme, one
// KV head of head_dim 128 serving a GQA group of 4 query heads over T tokens (synthetic keys and
// values with outlier channels, aqpim/kv_capture.h), one thread. The same rows for f16 (the
// baseline), the scalar schemes, TurboQuant, QJL and PQ, so ratios come from one run. Counters:
// tokens/s and the bytes/s of the cache the call reads (memory() of the head).
//   build/bin/bench_kv_schemes --benchmark_counters_tabular=true --benchmark_repetitions=5

#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/kv_capture.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/workspace.h"

namespace {

using namespace aqpim;

constexpr int kD = 128, kGroup = 4;

struct Filled {
    std::unique_ptr<KvCache> cache;
    std::vector<float> q;  ///< [kGroup][kD] the query of the last position
};

/// A cache of `spec` holding T synthetic tokens (built once per (spec, T)).
const Filled& filled(const std::string& spec, std::int64_t T) {
    static std::map<std::pair<std::string, std::int64_t>, Filled> caches;
    Filled& f = caches[{spec, T}];
    if (!f.cache) {
        const KvShape shape{1, 1, kD};
        const CapturedAttention a = synthetic_attention(int(T), kGroup, 1, kD, 5);
        f.cache = make_kv_cache(parse_kv_scheme(spec), shape, {0, T});
        f.cache->add_sequence(0);
        f.cache->append(0, 0, T, a.k.data(), a.v.data());
        f.q.assign(a.q.end() - kGroup * kD, a.q.end());
    }
    return f;
}

void BM_Attend(benchmark::State& state, const std::string& spec) {
    const std::int64_t T = state.range(0);
    const Filled& f = filled(spec, T);
    std::vector<float> out(kGroup * kD);
    const std::int64_t pos = T - 1;
    Workspace ws;
    const KvQuery q{f.q.data(), kGroup * kD, 1, kGroup, &pos, 1.0f / std::sqrt(float(kD)), out.data(), kGroup * kD, &ws};
    for (auto _ : state) {
        f.cache->attend(0, 0, 0, q);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["tokens/s"] = benchmark::Counter(double(T) * state.iterations(), benchmark::Counter::kIsRate);
    state.counters["bytes/s"] =
        benchmark::Counter(double(f.cache->memory().bytes) * state.iterations(), benchmark::Counter::kIsRate);
    state.counters["bits/elem"] = f.cache->memory().bits_per_element(f.cache->shape());
}

const int kRegistered = [] {
    for (const char* spec : {"f16", "q4_0", "kivi2", "turbo:bits=2.5", "turbo:bits=3", "turbo:bits=3.5", "turbo:bits=4",
                             "turbo:bits=3,qjl=1", "qjl", "qjl:values=f16", "pq"})
        benchmark::RegisterBenchmark(("attend/" + std::string(spec)).c_str(), BM_Attend, std::string(spec))
            ->Arg(8192)
            ->Arg(32768)
            ->Unit(benchmark::kMicrosecond);
    return 0;
}();

}  // namespace

BENCHMARK_MAIN();
