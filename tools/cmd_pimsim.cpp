// `aqpim pimsim`: what attention costs on a PIM device (docs/pimsim.md), FP16 AttAcc-style and on
// PQ codes, against a GPU and the host-offload capacity wall; `--validate attacc` checks the
// simulator against AttAcc's published cycle counts (docs/pim-validation.md).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/kv_pq.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/model.h"
#include "aqpim/pim_attention.h"
#include "aqpim/pim_baseline.h"
#include "aqpim/preset.h"
#include "aqpim/pim_trace.h"
#include "aqpim/pim_validate.h"
#include "cli_checks.h"
#include "commands.h"
#include "pimsim_report.h"

namespace aqpim::cli {
namespace {

struct PimsimArgs {
    std::string dram = "hbm3-5.2-attacc";
    std::string placement = "all";
    std::string workload = "all";
    std::string model = "llama-3-8b";
    int layers = 32, heads = 32, kv_heads = 8, head_dim = 128;
    double weight_bytes = 16.06e9;
    std::int64_t batch = 1, context = 32768;
    int devices = 1;
    bool no_power_cap = false, no_refresh = false;
    std::string kv = "pq";
    std::string pq_mapping = "token";
    std::string gpu;
    double pim_capacity = 0;
    std::string validate, trace_file, plot;
    std::string kv_trace;          ///< replay a step of `aqpim run --trace`
    std::int64_t trace_step = -1;
    bool json = false, constraints = false;
};

void run_validation(const PimsimArgs& a) {
    AQPIM_CHECK(a.validate == "attacc", "--validate: unknown reference '{}' (known: attacc)", a.validate);
    const auto rows = validate_attacc(!a.no_refresh);
    bool ok = true;
    for (const auto& r : rows) ok = ok && std::abs(r.error()) <= kAttAccTolerance;
    if (a.json) {
        nlohmann::ordered_json j;
        j["reference"] = "AttAcc simulator ramulator.out: 130 heads x 2048 tokens x head_dim 128, one HBM3 5.2 Gbps stack";
        j["refresh"] = !a.no_refresh;
        j["tolerance"] = kAttAccTolerance;
        auto& arr = j["cases"] = nlohmann::ordered_json::array();
        for (const auto& r : rows)
            arr.push_back({{"name", r.name}, {"placement", r.placement}, {"power_cap", r.power_cap},
                           {"attacc_cycles", r.reference}, {"simulated_cycles", r.simulated}, {"error", r.error()},
                           {"within_tolerance", std::abs(r.error()) <= kAttAccTolerance}});
        j["pass"] = ok;
        fmt::print("{}\n", j.dump(2));
    } else {
        fmt::print("AttAcc validation: FP16 attention, 130 heads x 2048 tokens x head_dim 128, HBM3 5.2 Gbps stack{}\n",
                   a.no_refresh ? ", refresh left out" : "");
        fmt::print("{:<30} {:>12} {:>12} {:>8}\n", "case", "AttAcc", "aqpim", "error");
        for (const auto& r : rows)
            fmt::print("{:<30} {:>12.0f} {:>12.0f} {:>+7.1f}%\n", r.name, r.reference, r.simulated, 100 * r.error());
        fmt::print("{} (tolerance {:.0f}%)\n", ok ? "all within tolerance" : "OUT OF TOLERANCE", 100 * kAttAccTolerance);
    }
    AQPIM_CHECK(ok || a.no_refresh, "AttAcc validation failed: a case is off by more than {:.0f}%", 100 * kAttAccTolerance);
}

void print_constraints(const DramSpec& spec) {
    fmt::print("timing constraints of {} (cycles of tCK = {:.4g} ns){}:\n", spec.name, spec.timing.tCK * 1e9,
               spec.power_cap ? ", power cap on" : "");
    for (const auto& c : pim_constraints(spec)) {
        auto names = [](std::uint32_t m) {
            std::string s;
            for (int i = 0; i < kPimCmdCount; ++i)
                if (m & (1u << i)) s += fmt::format("{}{}", s.empty() ? "" : ",", cmd_name(PimCmd(i)));
            return s;
        };
        fmt::print("  {:<15} {:<28} -> {:<40} {:>5}{}  ({})\n", level_name(c.level), names(c.prev), names(c.next),
                   c.latency, c.window > 1 ? fmt::format(" per {} ", c.window) : "", c.name);
    }
}

std::vector<PimPlacement> placements(const std::string& s) {
    if (s == "all") return {PimPlacement::bank, PimPlacement::bank_group, PimPlacement::buffer_die};
    return {parse_placement(s)};
}

void run_pimsim(const PimsimArgs& args) {
    if (!args.validate.empty()) return run_validation(args);
    for (const std::string* out : {&args.trace_file, &args.plot})
        if (!out->empty()) check_output_not_input(*out, {args.dram, args.kv_trace}, out == &args.plot ? "--plot" : "--trace-commands");
    PimsimArgs a = args;
    std::optional<PimTraceStep> traced;
    if (!a.kv_trace.empty()) {
        // The model shape, scheme and PQ state come from the recorded run.
        const KvTrace tr = read_kv_trace(a.kv_trace);
        AQPIM_CHECK(parse_kv_scheme(tr.scheme).name == "pq",
                    "--kv-trace {}: recorded with the '{}' cache; pimsim replays a PQ cache's state (record with "
                    "`aqpim run --kv pq... --trace FILE`)", a.kv_trace, tr.scheme);
        traced = pim_trace_step(tr, a.trace_step);
        a.model = fmt::format("{} (trace {}, step {})", tr.model, a.kv_trace, traced->step);
        a.layers = tr.n_layer;
        a.heads = tr.n_head;
        a.kv_heads = tr.n_kv_head;
        a.head_dim = tr.head_dim;
        a.batch = traced->n_seqs;
        a.context = traced->shape.context;
        a.kv = tr.scheme;
    }
    DramSpec spec = DramSpec::load(a.dram);
    spec.power_cap = !a.no_power_cap;
    if (a.constraints) return print_constraints(spec);
    AQPIM_CHECK(a.layers > 0 && a.heads > 0 && a.kv_heads > 0 && a.head_dim > 0,
                "model shape must be positive (layers {}, heads {}, kv-heads {}, head-dim {})", a.layers, a.heads,
                a.kv_heads, a.head_dim);
    AQPIM_CHECK(a.heads % a.kv_heads == 0, "--heads {} is not a multiple of --kv-heads {}", a.heads, a.kv_heads);
    AQPIM_CHECK(a.batch > 0 && a.context > 0 && a.devices > 0, "batch {}, context {} and devices {} must be positive",
                a.batch, a.context, a.devices);
    const std::int64_t kv_heads = std::int64_t(a.layers) * a.kv_heads * a.batch;
    AQPIM_CHECK(a.devices <= kv_heads, "--devices {}: more PIM devices than the {} KV heads (layers x kv-heads x batch) "
                "the work is spread over", a.devices, kv_heads);
    AQPIM_CHECK(a.workload == "all" || a.workload == "fp16" || a.workload == "pq",
                "--workload: unknown '{}' (fp16, pq or all)", a.workload);

    PimsimReport rep;
    rep.dram = spec.name;
    rep.model = a.model;
    rep.power_cap = spec.power_cap;
    rep.shape.kv_heads = std::int64_t(a.layers) * a.kv_heads * a.batch;
    rep.shape.group = a.heads / a.kv_heads;
    rep.shape.head_dim = a.head_dim;
    rep.shape.context = a.context;
    rep.shape.devices = a.devices;

    // aqpim's own accounting of the PQ cache: parameters, f16 tokens, versions, bytes.
    KvShape kv_shape;
    kv_shape.n_layer = a.layers;
    kv_shape.n_kv_head = a.kv_heads;
    kv_shape.head_dim = a.head_dim;
    const KvSchemeSpec scheme = parse_kv_scheme(a.kv);
    AQPIM_CHECK(scheme.name == "pq", "--kv must be a pq scheme (e.g. pq:m=32,nbits=4), got '{}'", a.kv);
    const PqKvParams pqp = PqKvParams::from_spec(scheme, kv_shape);
    const KvMemory fp = pq_sequence_footprint(pqp, kv_shape, a.context, a.context);
    const PqSchedule sched(pqp);
    PimPqParams pq;
    pq.k_m = pqp.k_m > 0 ? pqp.k_m : pqp.m;
    pq.v_m = pqp.v_m > 0 ? pqp.v_m : pqp.m;
    pq.nbits = pqp.nbits;
    pq.f16_tokens = a.context - sched.coded(a.context);
    pq.versions = sched.versions_started(std::max<std::int64_t>(1, sched.coded(a.context)));
    pq.refresh = pqp.refresh;
    pq.mapping = parse_pq_mapping(a.pq_mapping);
    AQPIM_CHECK(pq.mapping != PimPqParams::Mapping::subspace || a.placement == "bank" || a.placement == "all",
                "--pq-mapping subspace spreads subspaces over the banks of a group: it needs --placement bank (or all), "
                "not {}", a.placement);
    if (traced) {
        pq.f16_tokens = std::min(traced->f16_tokens, a.context);
        pq.versions = traced->versions;
    }

    std::optional<Device> dev;
    if (!a.gpu.empty()) dev = device_from_preset(find_preset("device", a.gpu));  // bad names fail before the simulation

    PimChannel::Options opt;
    opt.refresh = !a.no_refresh;
    std::optional<OutputFile> trace;
    if (!a.trace_file.empty()) {
        trace.emplace(a.trace_file, "--trace-commands");
        trace->stream() << "# aqpim pimsim command trace: cycle command pch rank bg bank row col (busiest channel)\n";
    }
    for (const PimPlacement p : placements(a.placement)) {
        for (const std::string w : {"fp16", "pq"}) {
            if (a.workload != "all" && a.workload != w) continue;
            PimChannel::Options o = opt;
            if (trace && rep.runs.empty()) o.trace = &trace->stream();  // the first simulation only
            const auto t0 = std::chrono::steady_clock::now();
            PimsimRun run;
            run.workload = w;
            run.placement = p;
            try {
                run.result = w == "fp16" ? simulate_fp16_attention(spec, p, rep.shape, o)
                                         : simulate_pq_attention(spec, p, rep.shape, pq, o);
            } catch (const Error& e) {
                // The capacity wall: report it and go on with what fits.
                if (std::string(e.what()).find("does not fit") == std::string::npos) throw;
                run.does_not_fit = e.what();
            }
            run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            rep.runs.push_back(std::move(run));
        }
    }

    // Capacity wall: the KV cache alone in the PIM devices.
    auto& cap = rep.capacity;
    cap.capacity = a.pim_capacity > 0 ? a.pim_capacity : double(spec.org.device_bytes()) * a.devices;
    cap.f16_bytes_per_seq = double(a.context) * kv_shape.elements_per_token() * 2;
    cap.pq_bytes_per_seq = double(fp.bytes);
    cap.pq_bits_per_element = fp.bits_per_element(kv_shape);
    cap.f16_batch = fit_count(cap.capacity, 0, cap.f16_bytes_per_seq);
    cap.pq_batch = fit_count(cap.capacity, 0, cap.pq_bytes_per_seq);
    cap.f16_max_context = fit_count(cap.capacity, 0, double(kv_shape.elements_per_token()) * 2);
    {   // PQ: largest context whose footprint fits (footprint grows monotonically with n).
        std::int64_t lo = 0, hi = std::int64_t(1) << 34;
        while (lo < hi) {
            const std::int64_t mid = lo + (hi - lo + 1) / 2;
            if (double(pq_sequence_footprint(pqp, kv_shape, mid, mid).bytes) <= cap.capacity) lo = mid;
            else hi = mid - 1;
        }
        cap.pq_max_context = lo;
    }

    if (dev) {
        PimsimGpu g;
        g.device = dev->name;
        // Weights first; whatever KV does not fit next to them streams from host memory.
        g.resident_capacity = std::max(0.0, dev->mem_capacity - a.weight_bytes);
        const double f16_kv = cap.f16_bytes_per_seq * a.batch, pq_kv = cap.pq_bytes_per_seq * a.batch;
        const double flops = 4.0 * double(rep.shape.kv_heads) * rep.shape.group * a.context * a.head_dim;
        g.f16 = gpu_attention_cost(*dev, f16_kv, flops, g.resident_capacity);
        g.pq = gpu_attention_cost(*dev, pq_kv, flops, g.resident_capacity);
        rep.gpu = g;
    }
    if (a.json) fmt::print("{}\n", pimsim_json(rep).dump(2));
    else print_pimsim_table(rep);
    if (trace) trace->commit();
    if (!a.plot.empty()) {
        write_output_file(a.plot, pimsim_json(rep).dump(2) + "\n", "--plot");
        if (!a.json) fmt::print("\nwrote {} (render with: python3 scripts/plot_pimsim.py {})\n", a.plot, a.plot);
    }
}

}  // namespace

void add_pimsim_command(CLI::App& app) {
    auto a = std::make_shared<PimsimArgs>();
    CLI::App* c = app.add_subcommand("pimsim", "simulate attention on PIM hardware (FP16 and PQ codes) vs GPU");
    c->add_option("--dram", a->dram, "DRAM/PIM preset (presets/dram) or path to one")->capture_default_str();
    c->add_option("--placement", a->placement, "bank | bank_group | buffer | all")->capture_default_str();
    c->add_option("--workload", a->workload, "fp16 | pq | all")->capture_default_str();
    c->add_option("--model", a->model, "name shown in the report")->capture_default_str();
    c->add_option("--layers", a->layers, "layers (default: Llama-3-8B)")
        ->capture_default_str()
        ->check(CLI::Range(1, ModelLimits::layers));
    c->add_option("--heads", a->heads, "query heads")->capture_default_str()->check(CLI::Range(1, ModelLimits::heads));
    c->add_option("--kv-heads", a->kv_heads, "KV heads")->capture_default_str()->check(CLI::Range(1, ModelLimits::heads));
    c->add_option("--head-dim", a->head_dim, "head dimension")
        ->capture_default_str()
        ->check(CLI::Range(1, ModelLimits::head_dim));
    c->add_option("--weight-bytes", a->weight_bytes, "model weight bytes on the GPU (capacity wall)")
        ->capture_default_str()
        ->check(finite_range(0, 1e15));
    c->add_option("--batch", a->batch, "sequences decoded together")->capture_default_str()->check(CLI::Range(1, 1 << 20));
    c->add_option("-c,--context", a->context, "tokens per sequence")
        ->capture_default_str()
        ->check(CLI::Range(1, ModelLimits::context));
    c->add_option("--devices", a->devices, "PIM stacks/chips the KV heads are spread over")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    c->add_flag("--no-power-cap", a->no_power_cap, "use the uncapped all-bank / same-bank MAC gaps");
    c->add_flag("--no-refresh", a->no_refresh, "leave refresh out");
    c->add_option("--kv", a->kv, "PQ scheme as for `aqpim run --kv` (pq:m=32,nbits=4,...)")->capture_default_str();
    c->add_option("--pq-mapping", a->pq_mapping, "PQ codes in the banks: token | subspace (docs/pimsim.md)")
        ->capture_default_str();
    c->add_option("--gpu", a->gpu, "device preset (presets/device) for the GPU and offload baselines");
    c->add_option("--pim-capacity", a->pim_capacity, "bytes of PIM for the capacity view (default: the devices')")
        ->check(finite_range(0, 1e15, true));
    c->add_option("--validate", a->validate, "check against a published simulator: attacc (its fixed cases; only --no-refresh and --json apply)");
    auto* kv_trace = c->add_option("--kv-trace", a->kv_trace, "replay a decode step of `aqpim run --trace FILE` (model, scheme, PQ state from it)");
    c->add_option("--trace-step", a->trace_step, "which step of --kv-trace (default: the last)")
        ->check(non_negative_integer())
        ->needs(kv_trace);
    c->add_option("--trace-commands", a->trace_file, "write the first simulation's command trace (docs/pimsim.md)");
    c->add_option("--plot", a->plot, "write the report JSON for scripts/plot_pimsim.py");
    c->add_flag("--json", a->json, "JSON output");
    c->add_flag("--constraints", a->constraints, "print the timing-constraint table of the preset");
    c->callback([a] { run_pimsim(*a); });
}

}  // namespace aqpim::cli
