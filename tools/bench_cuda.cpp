// `aqpim bench cuda`: the CUDA kernels' benchmark (src/cuda/cuda_bench.h) - PQ attention vs the
// dense f16 flash-decoding kernel vs decompress + cuBLAS over context and batch sweeps, and the
// encode step's cost. In a build without CUDA the command says so.

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/file_io.h"

#if AQPIM_HAVE_CUDA
#include "cuda/cuda_bench.h"
#endif

namespace aqpim::cli {

namespace {

struct CudaBenchArgs {
    std::vector<int> contexts{8192, 32768, 131072}, batches{1, 8, 32};
    int n_kv_heads = 8, group = 4, head_dim = 128, M = 32, nbits = 4, page = 256, versions = 4, reps = 10;
    bool no_fallback = false, quick = false, json = false;
    std::string out;
};

#if AQPIM_HAVE_CUDA
void run(const CudaBenchArgs& a) {
    cuda::CudaBenchOptions opt;
    opt.contexts = a.quick ? std::vector<int>{32768, 131072} : a.contexts;
    opt.batches = a.quick ? std::vector<int>{8} : a.batches;
    opt.n_kv_heads = a.n_kv_heads;
    opt.n_q = a.group;
    opt.D = a.head_dim;
    opt.M = a.M;
    opt.nbits = a.nbits;
    opt.page = a.page;
    opt.versions = a.versions;
    opt.reps = a.quick ? 5 : a.reps;
    opt.fallback = !a.no_fallback;
    std::optional<OutputFile> out;  // opened first: an unwritable path fails before the benchmark
    if (!a.out.empty()) out.emplace(a.out, "-o");
    const cuda::CudaBenchReport rep = cuda::run_cuda_bench(opt);
    const cuda::CudaDeviceFigures& f = rep.device;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const cuda::CudaBenchRow& r : rep.rows)
        rows.push_back({{"section", r.section}, {"kernel", r.kernel}, {"batch", r.batch}, {"context", r.context},
                        {"ms", r.ms}, {"MB", r.mbytes}, {"GB/s", r.gbps}, {"%peak", r.pct_peak}, {"%copy", r.pct_copy},
                        {"smem GB/s", r.smem_gbps}, {"%smem", r.pct_smem}, {"vs_dense", r.vs_dense}});
    const nlohmann::ordered_json report = {
        {"device", {{"name", f.name}, {"sms", f.sms}, {"sm_clock_ghz", f.sm_clock_ghz}, {"peak_gbps", f.peak_gbps},
                    {"copy_gbps", f.copy_gbps}, {"smem_peak_gbps", f.smem_peak_gbps}, {"l2_mb", f.l2_mb}}},
        {"nbits", a.nbits},
        {"rows", rows}};
    if (out) {
        out->stream() << report.dump(2) << "\n";
        out->commit();
    }
    if (a.json) {
        fmt::print("{}\n", report.dump(2));
        return;
    }
    fmt::print("device: {}, {} SMs, {:.2f} GHz, L2 {:.0f} MB; memory {:.0f} GB/s peak (reported), {:.0f} GB/s copy "
               "(measured); shared memory {:.0f} GB/s peak\n",
               f.name, f.sms, f.sm_clock_ghz, f.l2_mb, f.peak_gbps, f.copy_gbps, f.smem_peak_gbps);
    fmt::print("{:<10} {:<18} {:>5} {:>7} {:>9} {:>9} {:>8} {:>6} {:>6} {:>9} {:>6} {:>8}\n", "section", "kernel",
               "batch", "context", "ms", "MB", "GB/s", "%peak", "%copy", "smemGB/s", "%smem", "vs_dense");
    for (const cuda::CudaBenchRow& r : rep.rows)
        fmt::print("{:<10} {:<18} {:>5} {:>7} {:>9.4f} {:>9.1f} {:>8.1f} {:>6.1f} {:>6.1f} {:>9.1f} {:>6.1f} {:>8.2f}\n",
                   r.section, r.kernel, r.batch, r.context, r.ms, r.mbytes, r.gbps, r.pct_peak, r.pct_copy,
                   r.smem_gbps, r.pct_smem, r.vs_dense);
    fmt::print("(attention rows: vs_dense = dense f16 time / this time; encode rows: added % of the PQ attention time; "
               "combine rows: % of the dense time)\n");
}
#endif

}  // namespace

void add_bench_cuda_command(CLI::App& bench) {
    auto* cmd = bench.add_subcommand(
        "cuda", "CUDA kernels: PQ attention vs dense f16 flash-decoding vs decompress+cuBLAS, and the encode step");
    auto a = std::make_shared<CudaBenchArgs>();
    cmd->add_option("--contexts", a->contexts, "tokens per sequence")->delimiter(',')->check(CLI::Range(128, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--batch", a->batches, "sequences")->delimiter(',')->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--kv-heads", a->n_kv_heads, "KV heads per layer")->check(CLI::Range(1, 128))->capture_default_str();
    cmd->add_option("--group", a->group, "query heads per KV head (GQA ratio)")->check(CLI::Range(1, 8))->capture_default_str();
    cmd->add_option("--head-dim", a->head_dim, "head_dim")->check(CLI::IsMember({64, 128}))->capture_default_str();
    cmd->add_option("-m", a->M, "PQ subspaces of keys and values")->check(CLI::Range(1, 64))->capture_default_str();
    cmd->add_option("--nbits", a->nbits, "code width: 4, or 8 (the 8-bit kernel; needs head_dim / m <= 16)")
        ->check(CLI::IsMember({4, 8}))
        ->capture_default_str();
    cmd->add_option("--page", a->page, "tokens per page")->check(CLI::Range(32, 8192))->capture_default_str();
    cmd->add_option("--versions", a->versions, "codebook versions over the context")->check(CLI::Range(1, 256))
        ->capture_default_str();
    cmd->add_option("--reps", a->reps, "timed repetitions (median)")->check(CLI::Range(1, 1000))->capture_default_str();
    cmd->add_flag("--no-fallback", a->no_fallback, "skip decompress + cuBLAS");
    cmd->add_flag("--quick", a->quick, "the target points only: contexts 32K,128K, batch 8, 5 repetitions");
    cmd->add_flag("--json", a->json, "print JSON instead of a table");
    cmd->add_option("-o,--out", a->out, "also write the JSON to this file");
    cmd->callback([a] {
        AQPIM_CHECK(a->head_dim % a->M == 0, "-m {} must divide --head-dim {}", a->M, a->head_dim);
        AQPIM_CHECK(a->nbits == 4 || a->head_dim / a->M <= 16,
                    "--nbits 8 needs head_dim / m <= 16 (the 8-bit encode's subvector), got {} / {}", a->head_dim, a->M);
#if AQPIM_HAVE_CUDA
        run(*a);
#else
        AQPIM_FAIL("this build has no CUDA: the CUDA kernels are built when CMake finds nvcc (docs/cuda.md)");
#endif
    });
}

}  // namespace aqpim::cli
