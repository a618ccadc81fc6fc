// Predictions against published decode measurements (include/aqpim/perf_validation.h).

#include "aqpim/perf_validation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "aqpim/error.h"
#include "aqpim/roofline.h"

namespace aqpim {

std::vector<DecodeMeasurement> decode_measurements(const Preset& preset) {
    std::vector<DecodeMeasurement> out;
    const Preset points = preset.group("points");
    for (const std::string& id : points.members()) {
        const Preset p = points.group(id);
        DecodeMeasurement m;
        m.id = id;
        m.model = p.text("model");
        m.device = p.text("device");
        m.split = p.text("split");
        if (m.split != "fit" && m.split != "test") p.fail("split", fmt::format("\"{}\": expected fit or test", m.split));
        m.framework = p.text("framework");
        m.weight_bits = p.positive("weight_bits");
        m.context = p.count("context");
        m.tokens_per_s = p.positive("tokens_per_s");
        m.source = p.source("tokens_per_s");
        out.push_back(m);
    }
    AQPIM_CHECK(!out.empty(), "{}: field points: no measurements", preset.origin());
    return out;
}

DecodeFactors decode_defaults(const Preset& preset) {
    DecodeFactors d;
    const Preset fw = preset.group("frameworks");
    for (const std::string& name : fw.members()) {
        const Preset f = fw.group(name);
        FrameworkFactors x;
        x.launch = f.nonnegative("launch");
        if (x.launch > kFitLaunchMax) f.fail("launch", fmt::format("{} s per kernel launch is above the fit's bound {}", x.launch, kFitLaunchMax));
        x.gemv_bytes_per_sm_cycle = f.nonnegative("gemv_bytes_per_sm_cycle");
        d.frameworks[name] = x;
    }
    for (const DecodeMeasurement& m : decode_measurements(preset))
        if (!d.frameworks.count(m.framework))
            preset.group("points").group(m.id).fail("framework", fmt::format("\"{}\" is not in the preset's frameworks", m.framework));
    return d;
}

namespace {

/// A point's decode step, costed once; only the roofline depends on the fitted parameters.
struct Prepared {
    DecodeMeasurement point;
    Device device;
    PerfRun run;
    PhaseCost cost;
};

std::vector<Prepared> prepare(const std::vector<DecodeMeasurement>& points) {
    std::vector<Prepared> out;
    for (const DecodeMeasurement& m : points) {
        const PerfModel model = find_perf_model(m.model);
        PerfRun run;
        run.batch = 1;
        run.context = m.context;
        run.weight_bits = m.weight_bits;
        out.push_back({m, find_device(m.device), run, decode_cost(model, run, KvSizer(model.kv_shape(), "f16"))});
    }
    return out;
}

DecodePrediction predict_one(const Prepared& p, double eff_bandwidth, const FrameworkFactors& f) {
    PerfRun run = p.run;
    run.eff_bandwidth = eff_bandwidth;
    run.kernel_overhead = f.launch;
    run.bandwidth_cap = f.gemv_bytes_per_sm_cycle > 0 ? f.gemv_bytes_per_sm_cycle * p.device.issue_rate() : 0;
    const RooflineResult r = roofline(p.cost, p.device, run);
    return {p.point, r.tokens_per_s, r.tokens_per_s / p.point.tokens_per_s - 1, r.bandwidth, r.overhead_s};
}

const FrameworkFactors& factors_of(const DecodeFactors& factors, const DecodeMeasurement& m) {
    const auto it = factors.frameworks.find(m.framework);
    AQPIM_CHECK(it != factors.frameworks.end(), "point {}: no factors for framework \"{}\"", m.id, m.framework);
    return it->second;
}

double loss_of(const std::vector<Prepared>& prepared, double eff, const FrameworkFactors& f) {
    double s = 0;
    for (const Prepared& p : prepared) s += std::pow(std::log1p(predict_one(p, eff, f).error), 2);
    return s;
}

/// Minimum of a unimodal f on [a, b].
double golden_min(double a, double b, int iterations, const std::function<double(double)>& f) {
    const double g = (std::sqrt(5.0) - 1) / 2;
    double c = b - g * (b - a), d = a + g * (b - a), fc = f(c), fd = f(d);
    for (int i = 0; i < iterations; ++i) {
        if (fc < fd) {
            b = d, d = c, fd = fc;
            c = b - g * (b - a), fc = f(c);
        } else {
            a = c, c = d, fc = fd;
            d = a + g * (b - a), fd = f(d);
        }
    }
    return (a + b) / 2;
}

/// Best (tau, c_f) of one framework's points at a given eff_bw; returns the loss.
double fit_framework(const std::vector<Prepared>& prepared, double eff, FrameworkFactors& out) {
    const auto best_launch = [&](double c) {
        return golden_min(0, kFitLaunchMax, 36, [&](double t) { return loss_of(prepared, eff, {t, c}); });
    };
    const double log_c = golden_min(std::log(kFitIssueMin), std::log(kFitIssueMax), 36,
                                    [&](double lc) { return loss_of(prepared, eff, {best_launch(std::exp(lc)), std::exp(lc)}); });
    out.gemv_bytes_per_sm_cycle = std::exp(log_c);
    out.launch = best_launch(out.gemv_bytes_per_sm_cycle);
    return loss_of(prepared, eff, out);
}

}  // namespace

std::vector<DecodePrediction> predict_decode(const std::vector<DecodeMeasurement>& points, const DecodeFactors& factors) {
    std::vector<DecodePrediction> out;
    for (const Prepared& p : prepare(points)) out.push_back(predict_one(p, factors.eff_bandwidth, factors_of(factors, p.point)));
    return out;
}

double decode_loss(const std::vector<DecodeMeasurement>& points, const DecodeFactors& factors, const std::string& split) {
    double s = 0;
    for (const DecodePrediction& p : predict_decode(points, factors))
        if (p.point.split == split) s += std::pow(std::log1p(p.error), 2);
    return s;
}

DecodeFactors fit_decode(const std::vector<DecodeMeasurement>& points, const std::string& split) {
    std::map<std::string, std::vector<Prepared>> by_framework;
    std::size_t n = 0;
    for (const Prepared& p : prepare(points))
        if (p.point.split == split) by_framework[p.point.framework].push_back(p), ++n;
    AQPIM_CHECK(n >= 3, "{} measurements marked \"{}\": need at least 3 to fit", n, split);
    const auto total = [&](double eff, DecodeFactors* keep) {
        double s = 0;
        for (const auto& [name, prepared] : by_framework) {
            FrameworkFactors f;
            s += fit_framework(prepared, eff, f);
            if (keep) keep->frameworks[name] = f;
        }
        return s;
    };
    DecodeFactors fit;
    fit.eff_bandwidth = golden_min(kFitEffBandwidthMin, kFitEffBandwidthMax, 30, [&](double e) { return total(e, nullptr); });
    total(fit.eff_bandwidth, &fit);
    return fit;
}

}  // namespace aqpim
