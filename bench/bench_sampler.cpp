// Token sampling micro-benchmark (Google Benchmark), one thread: Sampler::sample on logits drawn
// N(0, sigma) over vocabularies of 4096 (austen-13m), 32000 (Llama 2) and 128256 (Llama 3), at
// temperature 0.8 with top_p 0.95 (the defaults) and 1.0, beside greedy argmax over the same
// logits (the floor: one pass). A server samples every sequence of a step after the forward call,
// so at batch 64 this cost is paid 64 times per step.
//   BM_Sample/<vocab>/<top_p x 100>/<sigma x 10>   items/s = tokens sampled per second
// BM_LlamaDefaults: a token of llama-server's /completion with its defaults (top_k 40, then the
// nucleus 0.95 and min_p 0.05 at temperature 1 in the logit processing, then the draw at 0.8);
// /1: top_k 0 (the nucleus over the whole vocabulary, its worst case).

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "aqpim/sampler.h"
#include "serve/logit_processing.h"

namespace {

using namespace aqpim;

std::vector<float> logits(int n_vocab, float sigma) {
    std::mt19937 gen(3);
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> l(static_cast<std::size_t>(n_vocab));
    for (float& x : l) x = normal(gen);
    return l;
}

void BM_Sample(benchmark::State& state) {
    const int n_vocab = int(state.range(0));
    const float top_p = float(state.range(1)) / 100.0f, sigma = float(state.range(2)) / 10.0f;
    const std::vector<float> l = logits(n_vocab, sigma);
    Sampler s(SamplerParams{0.8f, top_p, 7});
    for (auto _ : state) benchmark::DoNotOptimize(s.sample(l.data(), n_vocab));
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * std::int64_t(n_vocab) * 4);
}

void BM_Greedy(benchmark::State& state) {
    const int n_vocab = int(state.range(0));
    const std::vector<float> l = logits(n_vocab, 3.0f);
    Sampler s(SamplerParams{0.0f, 1.0f, 7});
    for (auto _ : state) benchmark::DoNotOptimize(s.sample(l.data(), n_vocab));
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * std::int64_t(n_vocab) * 4);
}

void BM_LlamaDefaults(benchmark::State& state) {
    const int n_vocab = int(state.range(0));
    const std::vector<float> l = logits(n_vocab, 3.0f);
    serve::LogitProcessing p;
    p.unit_temperature = true;
    p.top_k = state.range(1) ? 0 : 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    Sampler s(SamplerParams{0.8f, 1.0f, 7});
    std::vector<float> work(l.size());
    for (auto _ : state) {
        work = l;
        serve::apply_logit_processing(p, {}, 0, 0.8f, work.data(), n_vocab);
        benchmark::DoNotOptimize(s.sample(work.data(), n_vocab));
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * std::int64_t(n_vocab) * 4);
}

BENCHMARK(BM_LlamaDefaults)->ArgsProduct({{4096, 32000, 128256}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Greedy)->Arg(4096)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Sample)
    ->ArgsProduct({{4096, 32000, 128256}, {95, 100}, {10, 30}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
