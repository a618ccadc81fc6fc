// Model, device, energy and validation presets: every shipped one loads; inconsistent ones are
// refused with the file and the field named; the published-measurement errors are computed.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>

#include "aqpim/error.h"
#include "aqpim/perf_energy.h"
#include "aqpim/perf_validation.h"
#include "aqpim/roofline.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(RooflinePresets, EveryShippedPresetLoads) {
    for (const std::string& n : preset_names("model")) EXPECT_NO_THROW(find_perf_model(n)) << n;
    for (const std::string& n : preset_names("device")) EXPECT_NO_THROW(find_device(n)) << n;
    for (const std::string& n : preset_names("energy")) EXPECT_NO_THROW(find_energy_table(n)) << n;
    EXPECT_GE(preset_names("model").size(), 11u);
    EXPECT_GE(preset_names("device").size(), 9u);
    // The fields the PIM simulator reads from the GPU presets.
    for (const char* n : {"h100-sxm", "h200"}) {
        const Preset p = find_preset("device", n);
        for (const char* f : {"memory.bandwidth", "memory.capacity", "compute.f16", "compute.int8", "efficiency.bandwidth",
                              "efficiency.compute", "host_link.bandwidth", "host_link.latency", "host_link.energy_per_bit",
                              "interconnect.bandwidth", "interconnect.latency", "power.tdp"})
            EXPECT_GT(p.number(f), 0) << n << " " << f;
    }
    EXPECT_DOUBLE_EQ(find_device("h100-sxm").compute_f16, 989.4e12);  // dense, not the article's 60 TFLOP/s
}

const char* kModel = R"({"kind": "model", "name": "toy",
  "n_embd": {"value": 512, "source": "s"}, "n_ff": {"value": 1024, "source": "s"}, "n_layer": {"value": 2, "source": "s"},
  "n_head": {"value": 8, "source": "s"}, "n_kv_head": {"value": KV, "source": "s"}, "n_vocab": {"value": 100, "source": "s"}})";

std::string model_with_kv(const std::string& kv) {
    std::string t = kModel;
    t.replace(t.find("KV"), 2, kv);
    return t;
}

TEST(RooflinePresets, InconsistentModelsAreRefusedNamingFileAndField) {
    EXPECT_EQ(perf_model_from_preset(Preset::parse(model_with_kv("2"), "toy.json")).head_dim, 64);
    EXPECT_NE(error_of([] { perf_model_from_preset(Preset::parse(model_with_kv("3"), "toy.json")); })
                  .find("toy.json: field n_kv_head: n_head 8 is not a multiple of n_kv_head 3"),
              std::string::npos);
    EXPECT_NE(error_of([] { perf_model_from_preset(Preset::parse(model_with_kv("-1"), "toy.json")); }).find("toy.json: field n_kv_head"),
              std::string::npos);
    std::string moe = model_with_kv("2");
    moe.insert(moe.size() - 1, R"(, "n_expert": {"value": 2, "source": "s"}, "n_expert_used": {"value": 3, "source": "s"})");
    EXPECT_NE(error_of([&] { perf_model_from_preset(Preset::parse(moe, "toy.json")); }).find("field n_expert_used: 3 exceeds n_expert 2"),
              std::string::npos);
    EXPECT_NE(error_of([] { find_perf_model("no-such-model"); }).find("unknown model preset \"no-such-model\" (known: "), std::string::npos);
}

TEST(RooflinePresets, BadDeviceFieldsAreRefused) {
    nlohmann::ordered_json j = find_preset("device", "h100-sxm").json();
    j["efficiency"]["bandwidth"]["value"] = 1.5;
    EXPECT_NE(error_of([&] { device_from_preset(Preset::parse(j.dump(), "d.json")); }).find("d.json: field efficiency.bandwidth"),
              std::string::npos);
    j = find_preset("device", "h100-sxm").json();
    j["memory"].erase("capacity");
    EXPECT_NE(error_of([&] { device_from_preset(Preset::parse(j.dump(), "d.json")); }).find("d.json: field memory.capacity: missing"),
              std::string::npos);
    j = find_preset("device", "h100-pcie").json();
    j["gpu"]["loaded_clock"]["value"] = 2e9;  // above the boost clock
    EXPECT_NE(error_of([&] { device_from_preset(Preset::parse(j.dump(), "d.json")); }).find("d.json: field gpu.loaded_clock"),
              std::string::npos);
    j = find_preset("device", "hbm-pim").json();
    j["pim"]["internal_bandwidth"]["value"] = 1e9;  // below the external bandwidth
    EXPECT_NE(error_of([&] { device_from_preset(Preset::parse(j.dump(), "d.json")); }).find("field pim.internal_bandwidth"),
              std::string::npos);
    j = find_preset("energy", "article-7nm").json();
    j["dram"]["in_array_fraction"]["value"] = 2;
    EXPECT_NE(error_of([&] { energy_table_from_preset(Preset::parse(j.dump(), "e.json")); }).find("e.json: field dram.in_array_fraction"),
              std::string::npos);
}

TEST(RooflineValidation, PublishedBatch1DecodeErrors) {
    const Preset preset = find_preset("validation", "decode-batch1");
    const std::vector<DecodeMeasurement> points = decode_measurements(preset);
    ASSERT_EQ(points.size(), 26u);
    const DecodeFactors fit = fit_decode(points, "fit");
    // Physically bounded: a batch-1 GEMV does not stream above ~0.93 of the HBM/GDDR peak.
    EXPECT_GE(fit.eff_bandwidth, kFitEffBandwidthMin);
    EXPECT_LE(fit.eff_bandwidth, kFitEffBandwidthMax);
    ASSERT_EQ(fit.frameworks.size(), 4u);
    for (const auto& [name, f] : fit.frameworks) {
        EXPECT_GT(f.launch, 2e-6) << name;  // a few us per kernel, not 0 and not ms
        EXPECT_LT(f.launch, 10e-6) << name;
    }
    // llama.cpp's mat-vec kernels are issue-bound on the A100 (~1.0-1.2 TB/s); gpt-fast's and
    // torchao's (torch.compile, tinygemm) are not.
    EXPECT_LT(fit.frameworks.at("llamacpp-b2837").gemv_bytes_per_sm_cycle, 10);
    EXPECT_LT(fit.frameworks.at("llamacpp-2024q1").gemv_bytes_per_sm_cycle, 10);
    EXPECT_GT(fit.frameworks.at("gpt-fast").gemv_bytes_per_sm_cycle, 100);
    EXPECT_GT(fit.frameworks.at("torchao-2024").gemv_bytes_per_sm_cycle, 100);
    // The fit minimises the squared log error of the fit points: nearby parameters do no better.
    const double best = decode_loss(points, fit, "fit");
    EXPECT_LE(best, [&] { DecodeFactors x = fit; x.eff_bandwidth *= 0.97; return decode_loss(points, x, "fit"); }() + 1e-9);
    for (const auto& [name, f] : fit.frameworks)
        for (double k : {0.9, 1.1}) {
            DecodeFactors x = fit;
            x.frameworks[name].launch = f.launch * k;
            EXPECT_LE(best, decode_loss(points, x, "fit") + 1e-9) << name << " launch x" << k;
            x = fit;
            x.frameworks[name].gemv_bytes_per_sm_cycle = f.gemv_bytes_per_sm_cycle * k;
            EXPECT_LE(best, decode_loss(points, x, "fit") + 1e-9) << name << " issue x" << k;
        }
    // The presets' defaults (device efficiency.bandwidth, the preset's frameworks) are the fitted values.
    const DecodeFactors defaults = decode_defaults(preset);
    const auto with_default = predict_decode(points, defaults), with_fit = predict_decode(points, fit);
    for (const Device& d : {find_device("a100-80g"), find_device("h100-pcie"), find_device("h100-sxm"), find_device("rtx4090")})
        EXPECT_NEAR(d.eff_bandwidth, fit.eff_bandwidth, 0.005) << d.name;
    std::map<std::string, std::vector<double>> test_err;  // device -> |error| of held-out points
    for (std::size_t i = 0; i < points.size(); ++i) {
        EXPECT_NEAR(with_default[i].error, with_fit[i].error, 0.01) << points[i].id;
        if (points[i].split == "fit") {
            EXPECT_LT(std::fabs(with_default[i].error), 0.13) << points[i].id;
        } else {
            test_err[points[i].device].push_back(std::fabs(with_default[i].error));
        }
    }
    // Recorded state (docs/roofline.md), held out: the three H100 SXM points (torchao) within 5%, the
    // A100 (SXM and PCIe) and RTX 4090 points within 13%; the three H100 PCIe points (no H100 point
    // was fitted; the card's power-limited loaded clock from an independent microbenchmark) at +1%,
    // -10% and -11%: every held-out point within 15%.
    std::size_t n_test = 0, within = 0;
    for (const auto& [device, errs] : test_err)
        for (double e : errs) {
            ++n_test, within += e < 0.15;
            EXPECT_LT(e, device == "h100-sxm" ? 0.05 : 0.13) << device;
        }
    EXPECT_EQ(n_test, 14u);
    EXPECT_EQ(within, 14u);
    EXPECT_EQ(test_err["h100-sxm"].size(), 3u);
    ASSERT_EQ(test_err["h100-pcie"].size(), 3u);
    double h100_mean = 0;
    for (double e : test_err["h100-pcie"]) h100_mean += e / 3;
    EXPECT_LT(h100_mean, 0.08);
}

TEST(RooflineValidation, PowerLimitedClockBracketsTheH100PcieMeasurements) {
    // At the boost clock the model is too fast on all three H100 PCIe points, at the lowest clock
    // observed under load too slow on the F16 and 70B points: every measurement lies between the
    // two predictions, what a clock between 1395 and 1755 MHz predicts.
    const Preset preset = find_preset("validation", "decode-batch1");
    const std::vector<DecodeMeasurement> points = decode_measurements(preset);
    nlohmann::ordered_json boost_only = find_preset("device", "h100-pcie").json();
    ASSERT_TRUE(boost_only["gpu"].contains("loaded_clock"));
    boost_only["gpu"].erase("loaded_clock");
    boost_only["name"] = "h100-pcie-at-boost";
    const std::string boost_path = test::temp_path("h100-pcie-at-boost.json");
    std::ofstream(boost_path) << boost_only.dump();
    std::vector<DecodeMeasurement> at_boost = points;
    for (DecodeMeasurement& p : at_boost)
        if (p.device == "h100-pcie") p.device = boost_path;
    const DecodeFactors defaults = decode_defaults(preset);
    const auto loaded = predict_decode(points, defaults), boost = predict_decode(at_boost, defaults);
    int h100_pcie = 0;
    for (std::size_t i = 0; i < points.size(); ++i) {
        if (points[i].device != "h100-pcie") continue;
        ++h100_pcie;
        EXPECT_GT(boost[i].error, 0.08) << points[i].id;
        EXPECT_LT(loaded[i].error, 0.02) << points[i].id;
    }
    EXPECT_EQ(h100_pcie, 3);
}

TEST(RooflineValidation, IssueRoofCapsTheStreamingBandwidth) {
    const Device h = find_device("h100-pcie"), a = find_device("a100-80g");
    EXPECT_DOUBLE_EQ(h.issue_rate(), 114 * 1.395e9);  // the power-limited clock under load
    EXPECT_DOUBLE_EQ(h.sm_clock, 1.755e9);
    EXPECT_DOUBLE_EQ(a.issue_rate(), 108 * 1.41e9);
    EXPECT_DOUBLE_EQ(find_device("tpu-v4").issue_rate(), 0);  // not given: no issue roof
    const PerfModel m = find_perf_model("llama3-8b");
    PerfRun run;
    run.batch = 1;
    run.context = 256;
    run.kernel_overhead = 0;
    const PhaseCost c = decode_cost(m, run, KvSizer(m.kv_shape(), "f16"));
    const RooflineResult free = roofline(c, h, run);
    EXPECT_NEAR(free.bandwidth, 2.0e12 * h.eff_bandwidth, 1);
    run.bandwidth_cap = 7 * h.issue_rate();
    const RooflineResult capped = roofline(c, h, run);
    EXPECT_DOUBLE_EQ(capped.bandwidth, 7 * h.issue_rate());
    EXPECT_GT(capped.time_s, free.time_s * 1.3);
    run.bandwidth_cap = 1e15;  // above the memory roof: no effect
    EXPECT_DOUBLE_EQ(roofline(c, h, run).time_s, free.time_s);
    run.bandwidth_cap = -1;
    EXPECT_THROW(run.validate(), Error);
}

TEST(RooflineValidation, FrameworksAreValidated) {
    nlohmann::json j = find_preset("validation", "decode-batch1").json();
    j["frameworks"]["gpt-fast"]["launch"]["value"] = 1e-3;
    EXPECT_NE(error_of([&] { decode_defaults(Preset::parse(j.dump(), "v.json")); }).find("v.json: field frameworks.gpt-fast.launch"),
              std::string::npos);
    j = find_preset("validation", "decode-batch1").json();
    j["frameworks"].erase("gpt-fast");
    EXPECT_NE(error_of([&] { decode_defaults(Preset::parse(j.dump(), "v.json")); }).find("gpt-fast"), std::string::npos);
}

}  // namespace
}  // namespace aqpim
