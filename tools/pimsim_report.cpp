// Table and JSON output of `aqpim pimsim` (tools/pimsim_report.h).
#include "pimsim_report.h"

#include <fmt/format.h>

#include <utility>

namespace aqpim::cli {

namespace {

nlohmann::ordered_json energy_json(const PimEnergy& e) {
    return {{"activate_j", e.activate}, {"read_j", e.read},   {"compute_j", e.compute},
            {"buffer_j", e.buffer},     {"io_j", e.io},       {"refresh_j", e.refresh},
            {"background_j", e.background}, {"total_j", e.total()}};
}

const PimsimRun* find_run(const PimsimReport& r, const std::string& workload, PimPlacement p) {
    for (const auto& run : r.runs)
        if (run.does_not_fit.empty() && run.workload == workload && run.placement == p) return &run;
    return nullptr;
}

}  // namespace

void print_pimsim_table(const PimsimReport& r) {
    const auto& s = r.shape;
    fmt::print("dram {} ({} device{}, power cap {}), model {}: {} KV heads x {} tokens, head_dim {}, GQA {}\n\n",
               r.dram, s.devices, s.devices == 1 ? "" : "s", r.power_cap ? "on" : "off", r.model, s.kv_heads, s.context,
               s.head_dim, s.group);
    fmt::print("{:<5} {:<10} {:>11} {:>10} {:>11} {:>10} {:>9} {:>9}  {}\n", "kv", "placement", "time us", "cycles",
               "int. GB/s", "energy mJ", "LUT B", "sim s", "phases (cycles, busiest channel)");
    for (const auto& run : r.runs) {
        const PimResult& x = run.result;
        if (!run.does_not_fit.empty()) {
            fmt::print("{:<5} {:<10} does not fit: {}\n", run.workload, placement_name(run.placement), run.does_not_fit);
            continue;
        }
        std::string phases;
        for (const auto& [name, c] : x.phases)
            if (c > 0) phases += fmt::format("{}{} {}", phases.empty() ? "" : ", ", name, c);
        fmt::print("{:<5} {:<10} {:>11.1f} {:>10} {:>11.1f} {:>10.3f} {:>9} {:>9.3f}  {}\n", x.workload,
                   placement_name(x.placement), x.seconds * 1e6, x.cycles, x.internal_bandwidth / 1e9,
                   x.energy.total() * 1e3, x.workload == "pq" ? fmt::format("{:.0f}", x.lut_buffer_bytes) : "-",
                   run.wall_seconds, phases);
    }
    fmt::print("\nenergy breakdown (mJ): activate / read+TSV / compute / buffers / I/O / refresh / background\n");
    for (const auto& run : r.runs) {
        if (!run.does_not_fit.empty()) continue;
        const PimEnergy& e = run.result.energy;
        fmt::print("  {:<4} {:<10} {:.3f} / {:.3f} / {:.3f} / {:.3f} / {:.3f} / {:.3f} / {:.3f}\n", run.result.workload,
                   placement_name(run.result.placement), e.activate * 1e3, e.read * 1e3, e.compute * 1e3,
                   e.buffer * 1e3, e.io * 1e3, e.refresh * 1e3, e.background * 1e3);
    }
    bool compared = false;
    for (PimPlacement p : {PimPlacement::bank, PimPlacement::bank_group, PimPlacement::buffer_die}) {
        const auto* a = find_run(r, "fp16", p);
        const auto* b = find_run(r, "pq", p);
        if (!a || !b) continue;
        if (!std::exchange(compared, true)) fmt::print("\nPQ-PIM against FP16-PIM (same placement):\n");
        fmt::print("  {:<10} speedup {:.2f}x, energy ratio {:.2f}x, LUT buffer {:.0f} B/unit = {:.1f} mm^2 SRAM per device\n",
                   placement_name(p), a->result.seconds / b->result.seconds,
                   a->result.energy.total() / b->result.energy.total(), b->result.lut_buffer_bytes,
                   b->result.lut_sram_mm2);
    }
    if (r.gpu) {
        const auto& g = *r.gpu;
        fmt::print("\nGPU {} (KV over its memory interface; KV beyond {:.1f} GB streams over the host link):\n", g.device,
                   g.resident_capacity / 1e9);
        for (const auto& [name, c] : {std::pair{"f16", g.f16}, std::pair{"pq", g.pq}})
            fmt::print("  {:<4} {:>11.1f} us (HBM {:.1f}, link {:.1f}: {:.1f}% of the step), spilled {:.2f} GB, energy {:.3f} mJ\n",
                       name, c.seconds * 1e6, c.hbm_seconds * 1e6, c.link_seconds * 1e6, 100 * c.link_share,
                       c.spilled_bytes / 1e9, c.energy * 1e3);
        for (const auto& run : r.runs)
            if (run.does_not_fit.empty())
                fmt::print("  {} PIM {:<10} vs GPU f16: {:.2f}x faster, {:.2f}x less energy\n", run.result.workload,
                       placement_name(run.result.placement), g.f16.seconds / run.result.seconds,
                       g.f16.energy / run.result.energy.total());
    }
    const auto& c = r.capacity;
    fmt::print("\ncapacity wall ({:.2f} GB of PIM for the KV cache): per sequence of {} tokens f16 {:.3f} GB, PQ {:.3f} GB "
               "({:.3f} bits/element, everything counted)\n",
               c.capacity / 1e9, s.context, c.f16_bytes_per_seq / 1e9, c.pq_bytes_per_seq / 1e9, c.pq_bits_per_element);
    fmt::print("  batch that fits at this context: f16 {}, PQ {}; longest single context: f16 {}, PQ {} tokens\n",
               c.f16_batch, c.pq_batch, c.f16_max_context, c.pq_max_context);
}

nlohmann::ordered_json pimsim_json(const PimsimReport& r) {
    nlohmann::ordered_json j;
    j["dram"] = r.dram;
    j["model"] = r.model;
    j["power_cap"] = r.power_cap;
    j["shape"] = {{"kv_heads", r.shape.kv_heads}, {"group", r.shape.group}, {"head_dim", r.shape.head_dim},
                  {"context", r.shape.context}, {"devices", r.shape.devices}};
    auto& runs = j["runs"] = nlohmann::ordered_json::array();
    for (const auto& run : r.runs) {
        const PimResult& x = run.result;
        nlohmann::ordered_json o;
        o["workload"] = run.workload;
        o["placement"] = placement_name(run.placement);
        if (!run.does_not_fit.empty()) {
            o["does_not_fit"] = run.does_not_fit;
            runs.push_back(o);
            continue;
        }
        o["seconds"] = x.seconds;
        o["cycles"] = x.cycles;
        o["heads_per_channel"] = x.heads_per_channel;
        o["internal_bandwidth"] = x.internal_bandwidth;
        o["bytes_read"] = x.bytes_read;
        o["kv_bytes"] = x.kv_bytes;
        auto& ph = o["phases"] = nlohmann::ordered_json::object();
        for (const auto& [name, c] : x.phases) ph[name] = c;
        auto& cm = o["commands"] = nlohmann::ordered_json::object();
        for (int i = 0; i < kPimCmdCount; ++i)
            if (x.counts[std::size_t(i)]) cm[std::string(cmd_name(PimCmd(i)))] = x.counts[std::size_t(i)];
        o["energy"] = energy_json(x.energy);
        if (x.workload == "pq") {
            o["lut_buffer_bytes"] = x.lut_buffer_bytes;
            o["lut_sram_mm2_per_device"] = x.lut_sram_mm2;
        }
        o["simulation_wall_seconds"] = run.wall_seconds;
        runs.push_back(o);
    }
    const auto& c = r.capacity;
    j["capacity"] = {{"pim_bytes", c.capacity},
                     {"f16_bytes_per_sequence", c.f16_bytes_per_seq},
                     {"pq_bytes_per_sequence", c.pq_bytes_per_seq},
                     {"pq_bits_per_element", c.pq_bits_per_element},
                     {"f16_batch", c.f16_batch},
                     {"pq_batch", c.pq_batch},
                     {"f16_max_context", c.f16_max_context},
                     {"pq_max_context", c.pq_max_context}};
    if (r.gpu) {
        auto cost = [](const GpuAttentionCost& x) {
            return nlohmann::ordered_json{{"seconds", x.seconds},         {"hbm_seconds", x.hbm_seconds},
                                          {"link_seconds", x.link_seconds}, {"link_share", x.link_share},
                                          {"spilled_bytes", x.spilled_bytes}, {"energy_j", x.energy}};
        };
        j["gpu"] = {{"device", r.gpu->device},
                    {"resident_capacity", r.gpu->resident_capacity},
                    {"f16", cost(r.gpu->f16)},
                    {"pq", cost(r.gpu->pq)}};
    }
    return j;
}

}  // namespace aqpim::cli
