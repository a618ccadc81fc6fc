// Google Benchmark: weight products of the runtime.
//   BM_ReadBandwidth                        streaming-read roof of one core on a cold arena
//   BM_Matvec/<type>/<threads>/<level>      decode product y = W x, W [14336 x 4096] (Llama-3-8B's
//                                           ffn_up), a different copy of W each call from an arena
//                                           of 4 x LLC, so every byte comes from DRAM
//   BM_MatvecHot/<type>/<level>             the same product on W [256 x 4096] reused every call (in
//                                           cache): each kernel's compute roof
//   BM_MatvecF32x/<type>/<threads>          the alternative design for comparison: dequantize in
//                                           registers and FMA against f32 x (no x quantization)
//   BM_Matmul/<type>/<n>/<path>/<threads>   prefill product, W [4096 x 4096], n activations;
//                                           path 0 = per-row matvec, 1 = dequantized tiles + OpenBLAS
//                                           sgemm, 2 = dequantized 32-row panels + own AVX-512 kernel,
//                                           3 = the batch-invariant product (the server's decode)
// Counters: bytes/s of weights read; roof = the streaming read of the same arena measured in the
// same benchmark with the same thread count; of_roof = bytes/s / roof; GFLOP/s for matmul.
// On a shared machine run repetitions and read the "_max" rows (bytes/s) / "_min" rows (time):
//   build/bin/bench_matvec --benchmark_repetitions=3 --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "aqpim/bench_util.h"
#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "aqpim/workspace.h"
#include "aqpim/weights.h"
#include "model/quant_blocks.h"

namespace {

using namespace aqpim;

constexpr std::int64_t kRows = 14336, kCols = 4096;

const GgmlType kTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K};

/// Uniform values in [-scale, scale): cheap to generate for hundreds of MB.
std::vector<float> values(std::size_t n, std::uint64_t seed, float scale) {
    std::vector<float> v(n);
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (float& f : v) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f = scale * (float(std::int64_t(x >> 40) - (1 << 23)) / float(1 << 23));
    }
    return v;
}

/// An arena whose every slot holds the same quantized [rows x cols] matrix (one arena alive at a
/// time: at 4 x LLC they are large).
struct MatrixArena {
    GgmlType type;
    std::int64_t rows, cols;
    std::size_t bytes;
    std::unique_ptr<ColdArena> arena;
};

MatrixArena& matrices(GgmlType type, std::int64_t rows, std::int64_t cols, bool cold) {
    static MatrixArena m{GgmlType::F32, 0, 0, 0, nullptr};
    if (m.arena && m.type == type && m.rows == rows && m.cols == cols && (m.arena->n_slots() > 2) == cold) return m;
    m.arena.reset();
    m = {type, rows, cols, ggml_row_bytes(type, cols) * std::size_t(rows), nullptr};
    m.arena = std::make_unique<ColdArena>(m.bytes, cold ? cold_bytes(false) : m.bytes, ArenaFill::bytes);
    const std::int64_t chunk = 256;  // rows quantized at a time
    for (std::int64_t r = 0; r < rows; r += chunk) {
        const std::int64_t nr = std::min(chunk, rows - r);
        const auto w = values(std::size_t(nr * cols), std::uint64_t(r + 1), 0.05f);
        quantize(type, w.data(), m.arena->slot(0) + std::size_t(r) * ggml_row_bytes(type, cols), nr * cols);
    }
    for (std::int64_t s = 1; s < m.arena->n_slots(); ++s) std::memcpy(m.arena->slot(s), m.arena->slot(0), m.bytes);
    return m;
}

/// Streaming-read bytes/s over slots of the arena with nt threads (best of 3 passes over 3 slots).
double read_roof(ColdArena& a, std::size_t bytes, int nt) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        std::uint8_t* p = a.slot(1000 + rep);
        std::uint64_t sink = 0;
        Timer t;
        parallel_for(
            nt,
            [&](std::int64_t c) {
                const std::size_t lo = bytes * std::size_t(c) / std::size_t(nt), hi = bytes * std::size_t(c + 1) / std::size_t(nt);
                const std::uint64_t s = read_bytes(p + lo, hi - lo);
                if (s == 42) sink += s;
            },
            nt);
        best = std::max(best, double(bytes) / t.seconds());
        benchmark::DoNotOptimize(sink);
    }
    return best;
}

// args: type index, threads, level
void BM_Matvec(benchmark::State& state) {
    const GgmlType type = kTypes[state.range(0)];
    const int nt = int(state.range(1));
    const auto level = SimdLevel(state.range(2));
    if (!cpu_supports(level)) return state.SkipWithError("level not supported by this CPU");
    set_simd_level(level);
    MatrixArena& m = matrices(type, kRows, kCols, true);
    state.SetLabel(ggml_type_name(type) + "/" + simd_level_name(level));
    const double roof = read_roof(*m.arena, m.bytes, nt);
    const auto x = values(std::size_t(kCols), 7, 1.0f);
    std::vector<float> y(static_cast<std::size_t>(kRows));
    std::int64_t i = 0;
    Workspace ws;
    Timer t;
    for (auto _ : state) {
        matvec(WeightMatrix{type, kRows, kCols, m.arena->slot(i++)}, x.data(), y.data(), nt, &ws);
        benchmark::DoNotOptimize(y.data());
    }
    const double bps = double(m.bytes) * double(state.iterations()) / t.seconds();
    state.SetBytesProcessed(std::int64_t(m.bytes) * state.iterations());
    state.counters["roof_GB/s"] = roof / 1e9;
    state.counters["of_roof"] = bps / roof;
    set_simd_level(best_simd_level());
}

// args: type index, level. In cache: W [256 x 4096] (0.6-4 MB, in L2/LLC), the compute roof of
// the kernel (CPU time).
void BM_MatvecHot(benchmark::State& state) {
    const GgmlType type = kTypes[state.range(0)];
    const auto level = SimdLevel(state.range(1));
    if (!cpu_supports(level)) return state.SkipWithError("level not supported by this CPU");
    set_simd_level(level);
    const std::int64_t rows = 256;
    MatrixArena& m = matrices(type, rows, kCols, false);
    state.SetLabel(ggml_type_name(type) + "/" + simd_level_name(level));
    const auto x = values(std::size_t(kCols), 7, 1.0f);
    std::vector<float> y(static_cast<std::size_t>(rows));
    Workspace ws;
    for (auto _ : state) {
        matvec(WeightMatrix{type, rows, kCols, m.arena->slot(0)}, x.data(), y.data(), 1, &ws);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(std::int64_t(m.bytes) * state.iterations());
    set_simd_level(best_simd_level());
}

// ---- the alternative design: dequantize in registers, FMA against f32 x ----------------------------

#define AQPIM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

AQPIM_AVX512 float f32x_q8_0(const quant::BlockQ8_0* w, const float* x, std::int64_t nb) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (std::int64_t b = 0; b < nb; ++b) {
        const __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs))));
        const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs + 16))));
        const __m512 t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 32 * b + 16), _mm512_mul_ps(w0, _mm512_loadu_ps(x + 32 * b)));
        __m512& acc = b & 1 ? acc1 : acc0;
        acc = _mm512_fmadd_ps(t, _mm512_set1_ps(_cvtsh_ss(w[b].d)), acc);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/// xsum[b] = sum of x over block b (the -8 offset is applied once per block in f32).
AQPIM_AVX512 float f32x_q4_0(const quant::BlockQ4_0* w, const float* x, const float* xsum, std::int64_t nb) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    float corr = 0;
    const __m128i low = _mm_set1_epi8(0xF);
    for (std::int64_t b = 0; b < nb; ++b) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
        const __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, low)));
        const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), low)));
        const __m512 t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 32 * b + 16), _mm512_mul_ps(w0, _mm512_loadu_ps(x + 32 * b)));
        const float d = _cvtsh_ss(w[b].d);
        __m512& acc = b & 1 ? acc1 : acc0;
        acc = _mm512_fmadd_ps(t, _mm512_set1_ps(d), acc);
        corr += d * xsum[b];
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) - 8 * corr;
}

// args: type index (Q8_0 or Q4_0), threads
void BM_MatvecF32x(benchmark::State& state) {
    const GgmlType type = kTypes[state.range(0)];
    const int nt = int(state.range(1));
    if (!cpu_supports(SimdLevel::avx512)) return state.SkipWithError("needs AVX-512");
    MatrixArena& m = matrices(type, kRows, kCols, true);
    state.SetLabel(ggml_type_name(type) + "/f32 x");
    const double roof = read_roof(*m.arena, m.bytes, nt);
    const auto x = values(std::size_t(kCols), 7, 1.0f);
    std::vector<float> xsum(static_cast<std::size_t>(kCols / 32)), y(static_cast<std::size_t>(kRows));
    const std::size_t rb = ggml_row_bytes(type, kCols);
    std::int64_t i = 0;
    Timer t;
    for (auto _ : state) {
        const std::uint8_t* W = m.arena->slot(i++);
        for (std::int64_t b = 0; b < kCols / 32; ++b) {
            float s = 0;
            for (int j = 0; j < 32; ++j) s += x[std::size_t(32 * b + j)];
            xsum[std::size_t(b)] = s;
        }
        parallel_for(
            nt,
            [&](std::int64_t c) {
                const std::int64_t r0 = kRows * c / nt, r1 = kRows * (c + 1) / nt;
                for (std::int64_t r = r0; r < r1; ++r) {
                    const std::uint8_t* row = W + std::size_t(r) * rb;
                    y[std::size_t(r)] = type == GgmlType::Q8_0
                                            ? f32x_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(row), x.data(), kCols / 32)
                                            : f32x_q4_0(reinterpret_cast<const quant::BlockQ4_0*>(row), x.data(), xsum.data(), kCols / 32);
                }
            },
            nt);
        benchmark::DoNotOptimize(y.data());
    }
    const double bps = double(m.bytes) * double(state.iterations()) / t.seconds();
    state.SetBytesProcessed(std::int64_t(m.bytes) * state.iterations());
    state.counters["roof_GB/s"] = roof / 1e9;
    state.counters["of_roof"] = bps / roof;
}

// ---- matmul ----------------------------------------------------------------------------------------

/// W shapes of BM_Matmul (rows x cols): a Llama-7B projection, austen-13m's FFN up and down.
constexpr std::int64_t kMatmulShapes[][2] = {{4096, 4096}, {1408, 512}, {512, 1408}};

// args: type index, n, path (0 rows, 1 sgemm, 2 own, 3 invariant), threads, shape index (kMatmulShapes)
void BM_Matmul(benchmark::State& state) {
    const GgmlType type = kTypes[state.range(0)];
    const std::int64_t n = state.range(1), rows = kMatmulShapes[state.range(4)][0], cols = kMatmulShapes[state.range(4)][1];
    if (cols % ggml_type_traits(type).block_size != 0) return state.SkipWithError("columns not a multiple of the type's block");
    const quant::MatmulPath paths[] = {quant::MatmulPath::rows, quant::MatmulPath::sgemm, quant::MatmulPath::own,
                                       quant::MatmulPath::invariant};
    const auto path = paths[state.range(2)];
    const int nt = int(state.range(3));
    MatrixArena& m = matrices(type, rows, cols, false);
    const char* names[] = {"/rows", "/sgemm", "/own", "/invariant"};
    state.SetLabel(ggml_type_name(type) + names[state.range(2)] + "/" + std::to_string(rows) + "x" + std::to_string(cols));
    const auto X = values(std::size_t(n * cols), 9, 1.0f);
    std::vector<float> Y(std::size_t(n * rows));
    ThreadWorkspaces ws;
    for (auto _ : state) {
        quant::matmul_with(WeightMatrix{type, rows, cols, m.arena->slot(0)}, X.data(), n, Y.data(), nt, path, &ws);
        benchmark::DoNotOptimize(Y.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n * rows * cols) * double(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
}

void BM_ReadBandwidth(benchmark::State& state) {
    const std::size_t bytes = std::size_t(64) << 20;
    static ColdArena a(bytes, cold_bytes(false));
    std::int64_t i = 0;
    for (auto _ : state) benchmark::DoNotOptimize(read_bytes(a.slot(i++), bytes));
    state.SetBytesProcessed(std::int64_t(bytes) * state.iterations());
}

/// Adds "best" rows to repetition aggregates: the least disturbed repetition (min of times, max of
/// rates) on a shared machine. Run with --benchmark_repetitions=N.
void best_of(benchmark::internal::Benchmark* b) {
    b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
    b->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

void matvec_args(benchmark::internal::Benchmark* b) {
    best_of(b);
    for (int t = 0; t < 7; ++t)
        for (int nt : {1, 2})
            for (int level : {2, 1}) b->Args({t, nt, level});
}

BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matvec)->Apply(matvec_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MatvecHot)->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {2, 1, 0}})->Apply(best_of)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatvecF32x)->ArgsProduct({{3, 4}, {1, 2}})->Apply(best_of)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Matmul)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {1, 4, 8, 16, 32, 64, 256}, {0, 1, 2, 3}, {1, 2}, {0, 1, 2}})
    ->Apply(best_of)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
