// DRAM/PIM presets: every shipped preset loads, and missing or inconsistent fields are errors
// naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "aqpim/error.h"
#include "aqpim/pim_baseline.h"
#include "aqpim/pim_spec.h"
#include "aqpim/preset.h"

namespace aqpim {
namespace {

std::string preset_text(const std::string& name) {
    std::ifstream in(presets_dir() / "dram" / (name + ".json"));
    return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The AttAcc preset with `edit` applied to its JSON, parsed.
DramSpec edited(const std::function<void(nlohmann::ordered_json&)>& edit) {
    auto j = nlohmann::ordered_json::parse(preset_text("hbm3-5.2-attacc"));
    edit(j);
    return DramSpec::from_preset(Preset::parse(j.dump(), "test.json"));
}

void expect_error_naming(const std::function<void(nlohmann::ordered_json&)>& edit, const std::string& field) {
    try {
        edited(edit);
        FAIL() << "no error for " << field;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
}

TEST(PimSpec, ShippedPresetsLoad) {
    const auto names = preset_names("dram");
    for (const char* n : {"hbm3-5.2-attacc", "hbm3-6.4", "hbm3e-h200", "hbm2-pim", "gddr6-aim"})
        EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    for (const auto& n : names) {
        const DramSpec s = DramSpec::load(n);
        EXPECT_GT(s.org.device_bytes(), 0u) << n;
        EXPECT_GT(s.peak_external_bandwidth(), 1e10) << n;
        EXPECT_GT(s.peak_internal_bandwidth(PimPlacement::bank), s.peak_external_bandwidth()) << n;
    }
}

TEST(PimSpec, AttAccStackNumbers) {
    const DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    EXPECT_EQ(s.org.banks_per_channel(), 64);
    EXPECT_EQ(s.org.device_bytes(), std::uint64_t(16) << 30);
    EXPECT_EQ(s.nCCD_AB(), 6);  // power cap on by default
    EXPECT_EQ(s.timing.nCCD_AB, 4);
}

TEST(PimSpec, MissingFieldIsNamed) {
    expect_error_naming([](auto& j) { j["timing"].erase("nRCD"); }, "timing.nRCD");
    expect_error_naming([](auto& j) { j["organization"].erase("rows"); }, "organization.rows");
    expect_error_naming([](auto& j) { j["energy"].erase("act"); }, "energy.act");
    expect_error_naming([](auto& j) { j["pim"].erase("lanes"); }, "pim.lanes");
}

TEST(PimSpec, InconsistentFieldsAreNamed) {
    expect_error_naming([](auto& j) { j["timing"]["nRC"]["value"] = 40; }, "timing.nRC");
    expect_error_naming([](auto& j) { j["organization"]["banks"]["value"] = 32; }, "organization.banks");
    expect_error_naming([](auto& j) { j["organization"]["capacity"]["value"] = 1e9; }, "organization.capacity");
    expect_error_naming([](auto& j) { j["timing"]["nCCD_L"]["value"] = 1; }, "timing.nCCD_L");
    expect_error_naming([](auto& j) { j["timing"]["nFAW"]["value"] = 4; }, "timing.nFAW");
    expect_error_naming([](auto& j) { j["timing"]["nCCD_AB_cap"]["value"] = 2; }, "timing.nCCD_AB_cap");
    expect_error_naming([](auto& j) { j["pim"]["lanes"]["value"] = 64; }, "pim.lanes");
    expect_error_naming([](auto& j) { j["pim"]["placement"] = "socket"; }, "socket");
    expect_error_naming([](auto& j) { j["timing"]["nRCD"]["value"] = 19.5; }, "timing.nRCD");
    expect_error_naming([](auto& j) { j["timing"]["nRCD"].erase("source"); }, "timing.nRCD");
    // positive but no DRAM clock: 5e299 GB/s or an infinite time otherwise
    expect_error_naming([](auto& j) { j["timing"]["tCK"]["value"] = 1e-300; }, "timing.tCK");
    expect_error_naming([](auto& j) { j["timing"]["tCK"]["value"] = 1e300; }, "timing.tCK");
}

TEST(PimBaseline, DevicePresetAndOffload) {
    const auto dir = std::filesystem::temp_directory_path() / "aqpim_pim_device_test";
    std::filesystem::create_directories(dir);
    const auto path = dir / "gpu.json";
    auto num = [](double v, const char* u) { return nlohmann::json{{"value", v}, {"unit", u}, {"source", "test"}}; };
    // The device preset format of the roofline (include/aqpim/perf_device.h), read by its reader.
    nlohmann::json j = {{"kind", "device"}, {"name", "gpu"}, {"device_kind", "gpu"},
                        {"memory", {{"bandwidth", num(4e12, "B/s")}, {"capacity", num(80e9, "B")}}},
                        {"compute", {{"f16", num(1e15, "FLOP/s")}, {"int8", num(2e15, "OP/s")}}},
                        {"efficiency", {{"bandwidth", num(0.8, "1")}, {"compute", num(0.7, "1")}}},
                        {"interconnect", {{"bandwidth", num(450e9, "B/s")}, {"latency", num(1e-6, "s")}}},
                        {"host_link", {{"bandwidth", num(64e9, "B/s")}, {"latency", num(1e-5, "s")},
                                       {"energy_per_bit", num(1e-11, "J/bit")}}},
                        {"power", {{"tdp", num(700, "W")}}}};
    std::ofstream(path) << j.dump();
    const Device d = device_from_preset(find_preset("device", path.string()));
    EXPECT_DOUBLE_EQ(d.mem_bandwidth, 4e12);
    // Fits: HBM time only. Spills 10 GB: link time 10e9/64e9 + latency dominates.
    const auto fit = gpu_attention_cost(d, 8e9, 0, 60e9);
    EXPECT_DOUBLE_EQ(fit.seconds, 8e9 / (4e12 * 0.8));
    EXPECT_EQ(fit.link_seconds, 0);
    const auto spill = gpu_attention_cost(d, 70e9, 0, 60e9);
    EXPECT_DOUBLE_EQ(spill.link_seconds, 10e9 / 64e9 + 1e-5);
    EXPECT_DOUBLE_EQ(spill.link_share, spill.link_seconds / (spill.link_seconds + 70e9 / (4e12 * 0.8)));
    EXPECT_GT(spill.link_share, 0.85);
    EXPECT_EQ(fit_count(100, 10, 30), 3);
    EXPECT_EQ(fit_count(5, 10, 30), 0);
    j["efficiency"]["bandwidth"]["value"] = 1.5;
    std::ofstream(path) << j.dump();
    EXPECT_THROW(device_from_preset(find_preset("device", path.string())), Error);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace aqpim
