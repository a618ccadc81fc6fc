// The tables of `aqpim roofline` (tools/roofline_reports.h).

#include "roofline_reports.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/perf_energy.h"
#include "aqpim/perf_validation.h"
#include "aqpim/preset.h"

namespace aqpim::cli {
namespace {

constexpr double kGB = 1e9, kMB = 1e6;

const char* phase_name(Phase p) { return p == Phase::decode ? "decode" : "prefill"; }

Table components(const PhaseCost& cost, const RooflineResult& r, const std::string& title) {
    Table t;
    t.name = std::string(phase_name(cost.phase)) + "_components";
    t.title = title;
    t.columns = {"component", "GFLOP", "weights_MB", "kv_MB", "act_MB", "comm_MB", "intensity", "time_us", "share_%", "bound"};
    for (std::size_t i = 0; i < cost.parts.size(); ++i) {
        const Cost& c = cost.parts[i];
        const RoofTime& rt = r.parts[i];
        t.add({c.name, c.flops / 1e9, c.weight_bytes / kMB, c.kv_bytes / kMB, c.act_bytes / kMB, c.comm_bytes / kMB,
               c.mem_bytes() > 0 ? c.flops / c.mem_bytes() : 0.0, rt.time_s * 1e6, 100 * rt.time_s / r.time_s, rt.bound()});
    }
    const Cost tot = cost.total();
    t.add({"total", tot.flops / 1e9, tot.weight_bytes / kMB, tot.kv_bytes / kMB, tot.act_bytes / kMB, tot.comm_bytes / kMB,
           r.intensity, r.time_s * 1e6, 100.0, r.bound});
    return t;
}

nlohmann::json roofline_row(const char* phase, const PhaseCost& cost, const RooflineResult& r) {
    return {phase, double(cost.tokens), r.intensity, r.ridge, r.attainable / 1e12, r.peak_compute / 1e12, r.bandwidth / 1e12,
            r.bound, r.overhead_s * 1e3, r.time_aggregate_s * 1e3, r.time_s * 1e3, r.tokens_per_s};
}

Table roofline_summary(const PhaseCost& d, const RooflineResult& rd, const PhaseCost& p, const RooflineResult& rp) {
    Table t;
    t.name = "roofline";
    t.title = "Roofline (per device; attainable = min(compute roof, intensity x bandwidth))";
    t.columns = {"phase", "tokens", "intensity", "ridge", "attainable_TFLOPs", "compute_roof_TFLOPs", "bandwidth_TBs",
                 "bound", "launch_overhead_ms", "time_roofline_ms", "time_kernels_ms", "tokens_per_s"};
    for (auto row : {roofline_row("decode", d, rd), roofline_row("prefill", p, rp)}) t.add(row.get<std::vector<nlohmann::json>>());
    t.notes.push_back("time_roofline: the whole phase on one roofline; time_kernels: each component on its own roof, summed "
                      "(+ interconnect), the figure tokens_per_s uses; both include the fixed launch overhead");
    return t;
}

Table capacity(const RooflineSetup& s, const KvSizer& kv) {
    Table t;
    t.name = "capacity";
    t.title = fmt::format("Memory of one device ({:.1f} GB): weights, KV, what fits", s.device.mem_capacity / kGB);
    t.columns = {"quantity", "value", "unit"};
    const double w = weight_bytes_per_device(s.model, s.run);
    const double shards = double(s.run.tp) * s.run.pp;
    t.add({"parameters (total)", double(s.model.n_params_total()), "count"});
    t.add({"parameters (active per token)", double(s.model.n_params_active()), "count"});
    t.add({"weights per device", w / kGB, "GB"});
    t.add({"KV bytes per token (one sequence, all devices)", kv.sequence_bytes(s.run.context) / double(s.run.context), "B"});
    t.add({"KV bits per element at context", kv.bits_per_element(s.run.context), "bits"});
    t.add({"KV per device at batch x context", s.run.batch * kv.sequence_bytes(s.run.context) / shards / kGB, "GB"});
    t.add({"fits", w + s.run.batch * kv.sequence_bytes(s.run.context) / shards <= s.device.mem_capacity ? "yes" : "no", ""});
    t.add({"largest context at this batch", double(max_context(s.model, s.run, kv, s.device)), "tokens"});
    t.add({"largest batch at this context", double(max_batch(s.model, s.run, kv, s.device)), "sequences"});
    const std::int64_t x = weight_kv_crossover(s.model, s.run, kv);
    t.add({"context where KV read = weight read (this batch)", x > (std::int64_t(1) << 24) ? nlohmann::json("never") : nlohmann::json(double(x)), "tokens"});
    return t;
}

PerfRun with_batch(PerfRun r, int b) {
    r.batch = b;
    return r;
}

}  // namespace

std::vector<Table> summary_tables(const RooflineSetup& s) {
    const KvSizer kv(s.model.kv_shape(), s.run.kv_scheme, s.run.context);
    const PhaseCost d = decode_cost(s.model, s.run, kv), p = prefill_cost(s.model, s.run, kv);
    const RooflineResult rd = roofline(d, s.device, s.run), rp = roofline(p, s.device, s.run);
    return {components(d, rd, fmt::format("Decode step: {} sequence(s) at context {}, one token each (per device)", s.run.batch, s.run.context)),
            components(p, rp, fmt::format("Prefill: {} sequence(s) x {} prompt tokens (per device)", s.run.batch, s.run.prompt)),
            roofline_summary(d, rd, p, rp), capacity(s, kv)};
}

Table batch_table(const RooflineSetup& s) {
    const KvSizer kv(s.model.kv_shape(), s.run.kv_scheme, s.run.context);
    Table t;
    t.name = "batch";
    t.title = fmt::format("Decode vs batch at context {} (per device)", s.run.context);
    t.columns = {"batch", "GFLOP", "weights_GB", "kv_GB", "intensity", "attainable_TFLOPs", "bound", "step_ms", "tokens_per_s", "fits"};
    const double shards = double(s.run.tp) * s.run.pp;
    for (int b : s.batches) {
        const PerfRun run = with_batch(s.run, b);
        const PhaseCost c = decode_cost(s.model, run, kv);
        const RooflineResult r = roofline(c, s.device, run);
        const Cost tot = c.total();
        const bool fits = weight_bytes_per_device(s.model, run) + b * kv.sequence_bytes(run.context) / shards <= s.device.mem_capacity;
        t.add({b, tot.flops / 1e9, tot.weight_bytes / kGB, tot.kv_bytes / kGB, r.intensity, r.attainable / 1e12, r.bound,
               r.time_s * 1e3, r.tokens_per_s, fits});
    }
    return t;
}

Table context_table(const RooflineSetup& s) {
    const KvSizer kv(s.model.kv_shape(), s.run.kv_scheme, s.run.context);
    Table t;
    t.name = "context";
    t.title = fmt::format("Decode vs context at batch {}, KV {} (per device; cumulative = KV read generating tokens 1..n of one sequence)",
                          s.run.batch, kv.scheme());
    t.columns = {"context", "kv_bits_per_elem", "kv_GB_per_seq", "kv_GB_batch", "kv_share_of_bytes_%", "step_ms", "tokens_per_s", "cumulative_kv_TB", "fits"};
    const double shards = double(s.run.tp) * s.run.pp;
    for (std::int64_t n : s.contexts) {
        PerfRun run = s.run;
        run.context = n;
        const PhaseCost c = decode_cost(s.model, run, kv);
        const RooflineResult r = roofline(c, s.device, run);
        const Cost tot = c.total();
        const double seq = kv.sequence_bytes(n);
        const bool fits = weight_bytes_per_device(s.model, run) + run.batch * seq / shards <= s.device.mem_capacity;
        t.add({double(n), kv.bits_per_element(n), seq / kGB, run.batch * seq / kGB, 100 * tot.kv_bytes / tot.mem_bytes(),
               r.time_s * 1e3, r.tokens_per_s, cumulative_kv_bytes(kv, n) / 1e12, fits});
    }
    t.notes.push_back(fmt::format("largest context at batch {}: {} tokens; KV read overtakes weight read at context {}", s.run.batch,
                                  max_context(s.model, s.run, kv, s.device), weight_kv_crossover(s.model, s.run, kv)));
    return t;
}

Table quant_table(const RooflineSetup& s) {
    struct Q {
        const char* name;
        double w, a;
    };
    const Q quants[] = {{"FP16", 16, 16}, {"INT8", 8, 8}, {"W4A16", 4, 16}, {"W4A8", 4, 8}, {"W2A16", 2, 16}, {"W2A8", 2, 8}};
    Table t;
    t.name = "quant";
    t.title = fmt::format("Weight/activation precision x KV scheme: decode at batch {}, context {} (per device)", s.run.batch, s.run.context);
    t.columns = {"weights", "kv", "kv_bits", "weights_GB", "kv_GB", "intensity", "compute_roof_TFLOPs", "bound", "step_ms", "tokens_per_s", "speedup", "fits"};
    double base = 0;
    const double shards = double(s.run.tp) * s.run.pp;
    for (const std::string& scheme : s.kv_schemes) {
        const KvSizer kv(s.model.kv_shape(), scheme, s.run.context);
        for (const Q& q : quants) {
            PerfRun run = s.run;
            run.weight_bits = q.w;
            run.act_bits = q.a;
            run.kv_scheme = scheme;
            const PhaseCost c = decode_cost(s.model, run, kv);
            const RooflineResult r = roofline(c, s.device, run);
            if (base == 0) base = r.tokens_per_s;
            const double kv_gb = run.batch * kv.sequence_bytes(run.context) / shards / kGB;
            const double w_gb = weight_bytes_per_device(s.model, run) / kGB;
            t.add({q.name, kv.scheme(), kv.bits_per_element(run.context), w_gb, kv_gb, r.intensity, r.peak_compute / 1e12, r.bound,
                   r.time_s * 1e3, r.tokens_per_s, r.tokens_per_s / base, (w_gb + kv_gb) * kGB <= s.device.mem_capacity});
        }
    }
    t.notes.push_back("speedup against the first row; A8 rows use the integer roof when weights are <= 8 bits; KV bits are the "
                      "cache's own accounting at this context (scales, codebooks, f16 windows included)");
    return t;
}

Table energy_table(const RooflineSetup& s) {
    const KvSizer kv(s.model.kv_shape(), s.run.kv_scheme, s.run.context);
    const PhaseCost c = decode_cost(s.model, s.run, kv);
    const RooflineResult r = roofline(c, s.device, s.run);
    Table t;
    t.name = "energy";
    t.title = fmt::format("Decode energy per token (per device, batch {}, context {}, KV {}): J = per-op energy x FLOPs and bytes",
                          s.run.batch, s.run.context, kv.scheme());
    t.columns = {"energy_table", "weights_mJ", "kv_mJ", "l2_mJ", "compute_mJ", "other_mJ", "total_mJ", "tokens_per_J", "power_W_at_roofline",
                 "tdp_W", "tokens_per_s_at_tdp", "pim_removable_%"};
    const double tokens = double(c.tokens);
    for (const std::string& name : s.energy_tables) {
        const EnergyTable et = find_energy_table(name);
        const EnergyBreakdown e = phase_energy(c, et);
        const double per_token = e.total() / tokens;
        const double watts = e.total() / r.time_s;
        const double at_tdp = s.device.tdp > 0 ? std::min(r.tokens_per_s, s.device.tdp / per_token) : r.tokens_per_s;
        t.add({et.name, 1e3 * e.weights / tokens, 1e3 * e.kv / tokens, 1e3 * e.l2 / tokens, 1e3 * e.compute / tokens, 1e3 * e.other / tokens,
               1e3 * per_token, 1.0 / per_token, watts, s.device.tdp, at_tdp, 100 * e.pim_removable / e.total()});
    }
    t.notes.push_back("dynamic energy of the operations counted only (no idle/static power); power_W_at_roofline = energy per step / "
                      "step time; tokens_per_s_at_tdp = min(roofline speed, TDP / energy per token)");
    t.notes.push_back("pim_removable: the off-array share of weight and KV reads and their trip through L2, which computing "
                      "inside the DRAM avoids (dram.in_array_fraction of each table)");
    return t;
}

Table devices_table(const RooflineSetup& s) {
    Table t;
    t.name = "devices";
    t.title = fmt::format("{} on every device preset: decode at batch {}, context {}, KV {} (tp {}, pp {})", s.model.name, s.run.batch,
                          s.run.context, s.run.kv_scheme, s.run.tp, s.run.pp);
    t.columns = {"device", "bandwidth_TBs", "f16_TFLOPs", "ridge", "intensity", "bound", "tokens_per_s", "roof_utilisation_%", "max_context", "fits"};
    const KvSizer kv(s.model.kv_shape(), s.run.kv_scheme, s.run.context);
    const double shards = double(s.run.tp) * s.run.pp;
    for (const std::string& name : preset_names("device")) {
        const Device d = find_device(name);
        const PhaseCost c = decode_cost(s.model, s.run, kv);
        const RooflineResult r = roofline(c, d, s.run);
        const bool fits = weight_bytes_per_device(s.model, s.run) + s.run.batch * kv.sequence_bytes(s.run.context) / shards <= d.mem_capacity;
        t.add({d.name, d.stream_bandwidth() / 1e12, d.compute_f16 / 1e12, r.ridge, r.intensity, r.bound, r.tokens_per_s,
               100 * r.attainable / r.peak_compute, double(max_context(s.model, s.run, kv, d)), fits});
    }
    t.notes.push_back("roof_utilisation: attainable / compute roof (the share of the compute roof decode can use)");
    return t;
}

std::vector<Table> validate_tables(const std::string& validation_preset) {
    const Preset p = find_preset("validation", validation_preset);
    const std::vector<DecodeMeasurement> points = decode_measurements(p);
    const DecodeFactors defaults = decode_defaults(p);
    const DecodeFactors fit = fit_decode(points, "fit");
    DecodeFactors fit_all = fit;  // frameworks with no fit point keep their preset values
    for (const auto& [name, f] : defaults.frameworks) fit_all.frameworks.emplace(name, f);
    const auto with_default = predict_decode(points, defaults), with_fit = predict_decode(points, fit_all);
    Table t;
    t.name = "validate";
    t.title = fmt::format("Batch-1 decode: published measurements vs the model ({})", p.origin());
    t.columns = {"point", "split", "framework", "device", "weight_bits", "measured_tok_s", "default_tok_s", "default_err_%",
                 "fitted_tok_s", "fitted_err_%", "stream_GB_s", "launch_ms"};
    for (std::size_t i = 0; i < points.size(); ++i) {
        const DecodeMeasurement& m = points[i];
        t.add({m.id, m.split, m.framework, m.device, m.weight_bits, m.tokens_per_s, with_default[i].predicted_tokens_per_s,
               100 * with_default[i].error, with_fit[i].predicted_tokens_per_s, 100 * with_fit[i].error, with_fit[i].bandwidth / 1e9,
               with_fit[i].overhead_s * 1e3});
        t.notes.push_back(m.id + ": " + m.source);
    }
    t.notes.push_back("default: each device's efficiency.bandwidth and the preset's frameworks; fitted: refitted now on the \"fit\" points");
    t.notes.push_back("stream_GB_s: min(eff_bw x peak, c_f x SMs x clock) with the fitted factors; launch_ms: kernels x tau per token");
    Table f;
    f.name = "validate_factors";
    f.title = fmt::format("Factors (eff_bw bounded to [{}, {}]): default eff_bw = each device preset's; fitted eff_bw {:.3f}",
                          kFitEffBandwidthMin, kFitEffBandwidthMax, fit.eff_bandwidth);
    f.columns = {"framework", "default_launch_us", "default_gemv_B_per_SM_cycle", "fitted_launch_us", "fitted_gemv_B_per_SM_cycle"};
    for (const auto& [name, d] : defaults.frameworks) {
        const FrameworkFactors& x = fit_all.frameworks.at(name);
        f.add({name, d.launch * 1e6, d.gemv_bytes_per_sm_cycle, x.launch * 1e6, x.gemv_bytes_per_sm_cycle});
    }
    Table s;
    s.name = "validate_summary";
    s.title = "Mean and max |error| by split and device";
    s.columns = {"split", "device", "points", "default_mean_abs_err_%", "default_max_abs_err_%", "fitted_mean_abs_err_%", "fitted_max_abs_err_%"};
    for (const char* split : {"fit", "test"}) {
        std::vector<std::string> devices{"all"};
        for (const auto& m : points)
            if (m.split == split && std::find(devices.begin(), devices.end(), m.device) == devices.end()) devices.push_back(m.device);
        for (const std::string& dev : devices) {
            double sd = 0, sf = 0, md = 0, mf = 0;
            int n = 0;
            for (std::size_t i = 0; i < points.size(); ++i) {
                if (points[i].split != split || (dev != "all" && points[i].device != dev)) continue;
                ++n;
                sd += std::fabs(with_default[i].error), md = std::max(md, std::fabs(with_default[i].error));
                sf += std::fabs(with_fit[i].error), mf = std::max(mf, std::fabs(with_fit[i].error));
            }
            if (n) s.add({split, dev, n, 100 * sd / n, 100 * md, 100 * sf / n, 100 * mf});
        }
    }
    return {t, f, s};
}

}  // namespace aqpim::cli
