// Benchmark of the CUDA attention paths (see cuda_bench.h).

#include "cuda/cuda_bench.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>

#include "cuda/attention_common.cuh"
#include "cuda/cuda_check.h"
#include "cuda/decompress_fallback.h"
#include "cuda/dense_attention.h"
#include "cuda/device_check.h"
#include "cuda/device_problem.h"
#include "cuda/pq_attention.h"
#include "cuda/pq_tile_8bit.h"

namespace aqpim::cuda {

namespace {

/// Times `work` (enqueued on `stream`) with events, after writing `flush` (bigger than L2) so every
/// repetition starts with a cold cache; median of reps.
class Timer {
public:
    Timer(cudaStream_t stream, std::size_t flush_bytes) : stream_(stream), flush_(flush_bytes) {
        AQPIM_CUDA(cudaEventCreate(&start_));
        AQPIM_CUDA(cudaEventCreate(&stop_));
    }
    ~Timer() {
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    double median_ms(const std::function<void()>& work, int reps) {
        work();  // warm-up: module load, attributes, handles
        AQPIM_CUDA(cudaStreamSynchronize(stream_));
        std::vector<float> t(reps);
        for (float& ms : t) {
            AQPIM_CUDA(cudaMemsetAsync(flush_.as<void>(), 0, flush_.size(), stream_));
            AQPIM_CUDA(cudaEventRecord(start_, stream_));
            work();
            AQPIM_CUDA(cudaEventRecord(stop_, stream_));
            AQPIM_CUDA(cudaEventSynchronize(stop_));
            AQPIM_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
    }
private:
    cudaStream_t stream_;
    DeviceBytes flush_;
    cudaEvent_t start_{}, stop_{};
};

/// A CUDA graph of what `enqueue` puts on the stream, replayed by launch().
class Graph {
public:
    Graph(cudaStream_t stream, const std::function<void()>& enqueue) : stream_(stream) {
        enqueue();  // once outside the capture: function attributes, cuBLAS workspace
        AQPIM_CUDA(cudaStreamSynchronize(stream));
        AQPIM_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
        enqueue();
        cudaGraph_t g;
        AQPIM_CUDA(cudaStreamEndCapture(stream, &g));
        AQPIM_CUDA(cudaGraphInstantiate(&exec_, g, 0));
        cudaGraphDestroy(g);
    }
    ~Graph() { cudaGraphExecDestroy(exec_); }
    void launch() const { AQPIM_CUDA(cudaGraphLaunch(exec_, stream_)); }
private:
    cudaStream_t stream_;
    cudaGraphExec_t exec_{};
};

CudaDeviceFigures device_figures(cudaStream_t stream) {
    CudaDeviceFigures f;
    cudaDeviceProp prop{};
    AQPIM_CUDA(cudaGetDeviceProperties(&prop, 0));
    f.name = prop.name;
    f.sms = prop.multiProcessorCount;
    f.l2_mb = prop.l2CacheSize / 1048576.0;
    int clock_khz = 0, mem_khz = 0, bus_bits = 0;
    AQPIM_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    AQPIM_CUDA(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0));
    AQPIM_CUDA(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    f.sm_clock_ghz = clock_khz / 1e6;
    f.peak_gbps = 2.0 * mem_khz * 1e3 * bus_bits / 8 / 1e9;
    f.smem_peak_gbps = 128.0 * f.sms * f.sm_clock_ghz;
    const std::size_t n = std::size_t(2) << 30;
    DeviceBytes a(n), b(n);
    AQPIM_CUDA(cudaMemsetAsync(a.as<void>(), 1, n, stream));
    Timer timer(stream, 1 << 20);
    const double ms = timer.median_ms([&] { AQPIM_CUDA(cudaMemcpyAsync(b.as<void>(), a.as<void>(), n, cudaMemcpyDeviceToDevice, stream)); }, 5);
    f.copy_gbps = 2.0 * n / (ms * 1e6);
    return f;
}

/// Shared-memory bytes a PQ kernel moves per coded token of one KV head (docs/cuda.md), counted
/// from the code. Histogram path: table lookups, histogram read-modify-writes, the weights buffer
/// (written, read), staging writes and the code reads of both passes. MMA path: table lookups,
/// scores (written, read by the 4 warps for the tile's max), f16 weights (written, read as B
/// fragments by the 4 warps), staging writes, key code reads and the value code dwords.
double pq_smem_bytes_per_token(PqValuePath path, int nq_template, int Mk, int Mv) {
    const double lut = 4.0 * nq_template * Mk, staging = (block_bytes(Mk) + block_bytes(Mv)) / 32.0;
    const double key_codes = 4.0 * ((Mk + 3) / 4);
    if (is_mma(path))
        return lut + 4.0 * nq_template * (1 + kWarps) + 2.0 * nq_template * (1 + kWarps) + staging + key_codes +
               2.0 * ((Mv + 3) / 4);
    return lut + 8.0 * nq_template * Mv + 8.0 * nq_template + staging + key_codes + 4.0 * Mv;
}

/// The same count for the 8-bit kernel (pq_attention_8bit.cu): per token, the table lookups and the
/// partial scores' read-modify-write per key group, the weights (softmax: two reads, one write;
/// one read per warp and value group), the histogram read-modify-writes (one per subspace, all
/// heads; a second turn where codes meet is not counted), the staged code bytes (written, read);
/// per segment, building the tables, zeroing the histograms and reading them at the flush.
double pq8_smem_bytes_per_token(int nq_template, int Mk, int Mv) {
    const int G = group_subspaces_8bit(nq_template), gk = (Mk + G - 1) / G, gv = (Mv + G - 1) / G;
    const double per_token = 4.0 * nq_template * Mk + 8.0 * nq_template * gk + 12.0 * nq_template +
                             4.0 * nq_template * kWarps * gv + 8.0 * nq_template * Mv + 2.0 * (Mk + Mv);
    const double per_segment = 4.0 * nq_template * kKsub8 * (Mk + 2 * Mv);
    return per_token + per_segment / segment_tokens_8bit(nq_template);
}

CudaBenchRow row(const char* section, const char* kernel, int batch, int ctx, double ms, double bytes,
                 const CudaDeviceFigures& f) {
    CudaBenchRow r;
    r.section = section;
    r.kernel = kernel;
    r.batch = batch;
    r.context = ctx;
    r.ms = ms;
    r.mbytes = bytes / 1e6;
    r.gbps = bytes / (ms * 1e6);
    r.pct_peak = 100.0 * r.gbps / f.peak_gbps;
    r.pct_copy = 100.0 * r.gbps / f.copy_gbps;
    return r;
}

/// Waves of thread blocks a launch is split into: enough that the last, partial wave is a small
/// share of the time, few enough that the chunks stay long.
constexpr int kWaves = 4;

/// Blocks per (sequence, KV head) such that all of them fill at most kWaves full waves of the
/// device (slots = blocks resident per SM x SMs), so no wave is left mostly empty.
int chunks_per_stream(int streams, int slots) { return std::max(1, kWaves * slots / streams); }

AttentionShape bench_shape(const CudaBenchOptions& opt, int batch) {
    return AttentionShape{batch, opt.n_kv_heads, opt.n_q, opt.D, 1.0f / std::sqrt(float(opt.D))};
}

/// Dense f16 over all ctx tokens.
DeviceDenseProblem dense_problem(const CudaBenchOptions& opt, int batch, int ctx, int sms) {
    const AttentionShape shape = bench_shape(opt, batch);
    const int chunks = chunks_per_stream(batch * opt.n_kv_heads, dense_attention_blocks_per_sm(shape) * sms);
    const int chunk_tokens = std::max(64, (ctx / chunks + 63) / 64 * 64);
    return DeviceDenseProblem(shape, ctx, chunk_tokens, opt.seed);
}

/// PQ: sinks + window in f16, the rest coded over `versions` codebook versions; split over the
/// context by the occupancy of the kernel of `path`.
HostPqProblem pq_problem(const CudaBenchOptions& opt, int batch, int ctx, int sms, PqValuePath path) {
    PqProblemSpec spec;
    spec.shape = bench_shape(opt, batch);
    spec.Mk = spec.Mv = opt.M;
    spec.nbits = opt.nbits;
    spec.page_tokens = opt.page;
    spec.n_versions = opt.versions;
    const int coded = std::max(0, ctx - opt.sinks - opt.window);
    spec.n_coded = {coded};
    spec.n_f16 = {ctx - coded};
    const int pages = (coded + opt.page - 1) / opt.page;
    PqAttentionParams probe;
    probe.shape = spec.shape;
    probe.Mk = spec.Mk;
    probe.Mv = spec.Mv;
    probe.nbits = spec.nbits;
    // One more block per stream attends the f16 rows.
    const int chunks = std::max(1, chunks_per_stream(batch * opt.n_kv_heads, pq_attention_blocks_per_sm(probe, path) * sms) - 1);
    spec.chunk_pages = std::max(1, (pages + chunks - 1) / chunks);
    spec.fill_data = false;
    spec.seed = opt.seed;
    return make_random_pq_problem(spec);
}

/// The value paths a benchmark of these codes times: all three at 4 bits (the tensor-core path at 4
/// and at 3 blocks per multiprocessor), the 8-bit kernel's one at 8.
std::vector<PqValuePath> value_paths(const CudaBenchOptions& opt) {
    if (opt.nbits == 8) return {PqValuePath::histogram};
    return {PqValuePath::histogram, PqValuePath::mma, PqValuePath::mma_wide};
}

const char* pq_row_name(const CudaBenchOptions& opt, PqValuePath path) {
    if (opt.nbits == 8) return "pq8";
    return path == PqValuePath::mma ? "pq_mma" : path == PqValuePath::mma_wide ? "pq_mma_wide" : "pq";
}

int device_sms() {
    int sms = 0;
    AQPIM_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    return sms;
}

}  // namespace

void run_cuda_profile_launches(const CudaBenchOptions& opt, int batch, int ctx) {
    const std::string why = cuda_device_unavailable();
    if (!why.empty()) throw std::runtime_error(why);
    const int sms = device_sms();
    {
        const DeviceDenseProblem d = dense_problem(opt, batch, ctx, sms);
        launch_dense_attention(d.params(), nullptr);
        AQPIM_CUDA(cudaDeviceSynchronize());
    }
    for (const PqValuePath path : value_paths(opt)) {
        const HostPqProblem h = pq_problem(opt, batch, ctx, sms, path);
        const DevicePqProblem d(h, opt.seed);
        launch_pq_attention(d.params(), nullptr, path);
        AQPIM_CUDA(cudaDeviceSynchronize());
    }
    if (opt.nbits == 4) {  // and the 8-bit kernel on the same shape
        CudaBenchOptions eight = opt;
        eight.nbits = 8;
        const DevicePqProblem d(pq_problem(eight, batch, ctx, sms, PqValuePath::histogram), opt.seed);
        launch_pq_attention(d.params(), nullptr);
        AQPIM_CUDA(cudaDeviceSynchronize());
    }
}

CudaBenchReport run_cuda_bench(const CudaBenchOptions& opt) {
    const std::string why = cuda_device_unavailable();
    if (!why.empty()) throw std::runtime_error(why);
    cudaStream_t stream;
    AQPIM_CUDA(cudaStreamCreate(&stream));
    CudaBenchReport rep;
    rep.device = device_figures(stream);
    const CudaDeviceFigures& f = rep.device;
    Timer timer(stream, std::size_t(std::max(64.0, 4 * f.l2_mb)) << 20);
    const int nq_template = group_instance(opt.n_q);
    for (int batch : opt.batches)
        for (int ctx : opt.contexts) {
            double dense_ms = 0;
            {
                const DeviceDenseProblem d = dense_problem(opt, batch, ctx, f.sms);
                const Graph g(stream, [&] { launch_dense_attention(d.params(), stream); });
                dense_ms = timer.median_ms([&] { g.launch(); }, opt.reps);
                CudaBenchRow r = row("attention", "dense_f16", batch, ctx, dense_ms, double(d.min_bytes()), f);
                r.vs_dense = 1.0;
                rep.rows.push_back(r);
                // The reduction across the dense kernel's chunks alone: its share of the dense time.
                const DenseAttentionParams& dp = d.params();
                const Graph comb(stream, [&] {
                    launch_combine(dp.shape, dp.n_chunks, dp.part_ml, dp.part_acc, dp.out, stream);
                });
                const double comb_ms = timer.median_ms([&] { comb.launch(); }, opt.reps);
                const double heads = double(batch) * opt.n_kv_heads * opt.n_q;
                CudaBenchRow c = row("combine", "combine (dense chunks)", batch, ctx, comb_ms,
                                     heads * (dp.n_chunks * (opt.D + 2.0) + opt.D) * 4, f);
                c.vs_dense = 100.0 * comb_ms / dense_ms;
                rep.rows.push_back(c);
            }
            double pq_ms = 0;
            std::unique_ptr<DevicePqProblem> hist_problem;  // the encode below writes into its pool
            for (const PqValuePath path : value_paths(opt)) {
                const HostPqProblem hp = pq_problem(opt, batch, ctx, f.sms, path);
                auto dp = std::make_unique<DevicePqProblem>(hp, opt.seed);
                const Graph attn(stream, [&] { launch_pq_attention(dp->params(), stream, path); });
                const double ms = timer.median_ms([&] { attn.launch(); }, opt.reps);
                CudaBenchRow r = row("attention", pq_row_name(opt, path), batch, ctx, ms, double(dp->min_bytes()), f);
                const double per_token = opt.nbits == 8 ? pq8_smem_bytes_per_token(nq_template, opt.M, opt.M)
                                                        : pq_smem_bytes_per_token(path, nq_template, opt.M, opt.M);
                const double smem = per_token * hp.n_coded[0] * opt.n_kv_heads * batch;
                r.smem_gbps = smem / (ms * 1e6);
                r.pct_smem = 100.0 * r.smem_gbps / f.smem_peak_gbps;
                r.vs_dense = dense_ms / ms;
                rep.rows.push_back(r);
                if (path == PqValuePath::histogram) {
                    pq_ms = ms;
                    hist_problem = std::move(dp);
                }
            }
            const DevicePqProblem& d = *hist_problem;

            // Encode of the step's new token (every KV head, K and V), alone and in one graph with attention.
            const std::vector<float> new_kv(std::size_t(batch) * opt.n_kv_heads * opt.D * 2, 0.5f);
            const DeviceBytes dnew = upload(new_kv);
            const float* k_new = dnew.as<float>();
            const float* v_new = k_new + std::size_t(batch) * opt.n_kv_heads * opt.D;
            const Graph enc(stream, [&] { launch_pq_encode(d.params(), k_new, v_new, d.pool(), stream); });
            const Graph both(stream, [&] {
                launch_pq_encode(d.params(), k_new, v_new, d.pool(), stream);
                launch_pq_attention(d.params(), stream);
            });
            const double enc_ms = timer.median_ms([&] { enc.launch(); }, opt.reps);
            const double both_ms = timer.median_ms([&] { both.launch(); }, opt.reps);
            CudaBenchRow e = row("encode", "encode", batch, ctx, enc_ms, double(new_kv.size()) * 4, f);
            e.vs_dense = 100.0 * enc_ms / pq_ms;
            rep.rows.push_back(e);
            CudaBenchRow eb = row("encode", "pq+encode (graph)", batch, ctx, both_ms, double(d.min_bytes()), f);
            eb.vs_dense = 100.0 * (both_ms - pq_ms) / pq_ms;
            rep.rows.push_back(eb);

#ifndef AQPIM_CUDA_NO_CUBLAS
            if (opt.fallback) {
                DecompressFallback fb(bench_shape(opt, batch), ctx);
                const double fb_ms = timer.median_ms([&] { fb.run(d.params(), stream); }, opt.reps);
                CudaBenchRow x = row("attention", "decompress_cublas", batch, ctx, fb_ms, double(fb.bytes_moved(d.params(), ctx)), f);
                x.vs_dense = dense_ms / fb_ms;
                rep.rows.push_back(x);
            }
#endif
        }
    AQPIM_CUDA(cudaStreamDestroy(stream));
    return rep;
}

}  // namespace aqpim::cuda
