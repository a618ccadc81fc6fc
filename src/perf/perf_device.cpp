// Devices: presets and the CPU probe (include/aqpim/perf_device.h).

#include "aqpim/perf_device.h"

#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "aqpim/bench_util.h"
#include "aqpim/error.h"
#include "aqpim/threads.h"

namespace aqpim {

double Device::compute_peak(double weight_bits, double act_bits) const {
    if (is_pim()) return pim_compute;
    return weight_bits <= 8 && act_bits <= 8 ? compute_int8 : compute_f16;
}

void Device::validate() const {
    const auto check = [&](const char* field, double v) {
        AQPIM_CHECK(v > 0, "device {}: field {}: must be > 0, is {}", origin, field, v);
    };
    check("memory.bandwidth", mem_bandwidth);
    check("memory.capacity", mem_capacity);
    check("compute.f16", compute_f16);
    check("compute.int8", compute_int8);
    AQPIM_CHECK(eff_bandwidth > 0 && eff_bandwidth <= 1, "device {}: field efficiency.bandwidth: must be in (0, 1], is {}",
                origin, eff_bandwidth);
    AQPIM_CHECK(eff_compute > 0 && eff_compute <= 1, "device {}: field efficiency.compute: must be in (0, 1], is {}",
                origin, eff_compute);
}

Device device_from_preset(const Preset& p) {
    Device d;
    d.name = p.name();
    d.origin = p.origin();
    d.description = p.description();
    d.kind = p.text("device_kind");
    d.mem_bandwidth = p.positive("memory.bandwidth");
    d.mem_capacity = p.positive("memory.capacity");
    d.compute_f16 = p.positive("compute.f16");
    d.compute_int8 = p.positive("compute.int8");
    d.eff_bandwidth = p.positive("efficiency.bandwidth");
    d.eff_compute = p.positive("efficiency.compute");
    for (const char* f : {"efficiency.bandwidth", "efficiency.compute"})
        if (p.number(f) > 1) p.fail(f, fmt::format("a fraction in (0, 1], is {}", p.number(f)));
    d.host_bandwidth = p.positive("host_link.bandwidth");
    d.host_latency = p.nonnegative("host_link.latency");
    d.host_energy_per_bit = p.nonnegative("host_link.energy_per_bit");
    d.link_bandwidth = p.positive("interconnect.bandwidth");
    d.link_latency = p.nonnegative("interconnect.latency");
    d.tdp = p.positive("power.tdp");
    d.kernel_overhead = p.has("overhead.kernel") ? p.nonnegative("overhead.kernel") : 0.0;
    if (d.kernel_overhead > 1e-3) p.fail("overhead.kernel", fmt::format("{} s per kernel launch is not plausible (> 1 ms)", d.kernel_overhead));
    if (p.has("gpu.sm_count") || p.has("gpu.boost_clock")) {
        d.sm_count = double(p.count("gpu.sm_count", 100000));
        d.sm_clock = p.positive("gpu.boost_clock");
        if (d.sm_clock < 1e8 || d.sm_clock > 1e10) p.fail("gpu.boost_clock", fmt::format("{} Hz is not a GPU clock (expected 0.1-10 GHz)", d.sm_clock));
        d.sm_loaded_clock = d.sm_clock;
        if (p.has("gpu.loaded_clock")) {
            d.sm_loaded_clock = p.positive("gpu.loaded_clock");
            if (d.sm_loaded_clock < 1e8 || d.sm_loaded_clock > d.sm_clock)
                p.fail("gpu.loaded_clock", fmt::format("{} Hz must be a GPU clock no higher than gpu.boost_clock ({} Hz)",
                                                       d.sm_loaded_clock, d.sm_clock));
        }
    }
    if (d.kind == "pim") {
        d.pim_bandwidth = p.positive("pim.internal_bandwidth");
        d.pim_compute = p.positive("pim.compute");
        if (d.pim_bandwidth < d.mem_bandwidth)
            p.fail("pim.internal_bandwidth", fmt::format("{} is below the external memory.bandwidth {}: not a PIM device",
                                                         d.pim_bandwidth, d.mem_bandwidth));
    } else if (p.has("pim")) {
        p.fail("pim", fmt::format("only a device_kind \"pim\" has pim fields (this one is \"{}\")", d.kind));
    }
    if (d.compute_int8 < d.compute_f16 && d.kind != "pim")
        p.fail("compute.int8", fmt::format("{} is below compute.f16 {} (dense int8 is at least the f16 rate on every listed part)",
                                           d.compute_int8, d.compute_f16));
    d.validate();
    return d;
}

namespace {
double mem_total_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    double kb = 0;
    while (in >> key >> kb) {
        if (key == "MemTotal:") return kb * 1024.0;
        in.ignore(1 << 10, '\n');
    }
    return 0;
}
}  // namespace

Device measure_cpu_device() {
    Device d;
    d.name = "cpu";
    d.kind = "cpu";
    d.origin = "measured on this machine";
    const int threads = default_threads();
    const std::size_t slot = std::size_t(4) << 20;
    ColdArena arena(slot, cold_bytes(true));
    std::vector<std::uint64_t> sink(std::size_t(threads) * 16, 0);
    const double s = time_per_call(
        [&](std::int64_t i) {
            parallel_for(arena.n_slots(), [&](std::int64_t j) { sink[std::size_t(thread_index()) * 16] += read_bytes(arena.slot(i + j), slot); });
        },
        0.2, 2);
    d.mem_bandwidth = double(arena.bytes()) / s;
    d.mem_capacity = mem_total_bytes();
    AQPIM_CHECK(d.mem_capacity > 0, "device cpu: cannot read MemTotal from /proc/meminfo");
    d.compute_f16 = double(std::max(1u, std::thread::hardware_concurrency())) * 3e9 * 32;
    d.compute_int8 = 2 * d.compute_f16;
    d.eff_bandwidth = 1.0;  // the measurement is already what is achievable
    d.eff_compute = 0.5;
    d.host_bandwidth = d.mem_bandwidth;
    d.link_bandwidth = 25e9;
    d.link_latency = 2e-6;
    d.tdp = 0;  // unknown
    d.description = fmt::format("this CPU: {:.1f} GB/s streaming read measured with {} threads over {} MiB; compute "
                                "assumed {} cores x 3 GHz x 32 FLOP/cycle (not measured)",
                                d.mem_bandwidth / 1e9, threads, arena.bytes() >> 20, std::thread::hardware_concurrency());
    return d;
}

Device find_device(const std::string& name_or_path) {
    if (name_or_path == "cpu") return measure_cpu_device();
    return device_from_preset(find_preset("device", name_or_path));
}

}  // namespace aqpim
