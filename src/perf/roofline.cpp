// Roofline time of a phase on a device (include/aqpim/roofline.h).

#include "aqpim/roofline.h"

#include <algorithm>

#include "aqpim/error.h"

namespace aqpim {

const char* RoofTime::bound() const {
    if (overhead_s > std::max({compute_s, memory_s, comm_s})) return "launch";
    if (comm_s > std::max(compute_s, memory_s)) return "link";
    return compute_s > memory_s ? "compute" : "memory";
}

RooflineResult roofline(const PhaseCost& cost, const Device& device, const PerfRun& run) {
    run.validate();
    const double eff_bw = run.eff_bandwidth > 0 ? run.eff_bandwidth : device.eff_bandwidth;
    const double eff_c = run.eff_compute > 0 ? run.eff_compute : device.eff_compute;
    RooflineResult r;
    r.bandwidth = device.stream_bandwidth() * eff_bw;
    if (run.bandwidth_cap > 0) r.bandwidth = std::min(r.bandwidth, run.bandwidth_cap);
    const double f16 = (device.is_pim() ? device.pim_compute : device.compute_f16) * eff_c;
    const double int8 = (device.is_pim() ? device.pim_compute : device.compute_int8) * eff_c;
    const double link = device.link_bandwidth;
    const double overhead = run.kernel_overhead >= 0 ? run.kernel_overhead : device.kernel_overhead;
    double comm_total = 0, flops = 0, bytes = 0, int8_flops = 0;
    for (const Cost& c : cost.parts) {
        RoofTime t;
        t.name = c.name;
        t.compute_s = c.flops / (c.on_int8 ? int8 : f16);
        t.memory_s = c.mem_bytes() / r.bandwidth;
        t.comm_s = (c.comm_bytes > 0 ? c.comm_bytes / link : 0) + c.comm_messages * device.link_latency;
        t.overhead_s = c.launches * overhead;
        t.time_s = std::max(t.compute_s, t.memory_s) + t.comm_s + t.overhead_s;
        r.overhead_s += t.overhead_s;
        r.time_s += t.time_s;
        comm_total += t.comm_s;
        flops += c.flops;
        bytes += c.mem_bytes();
        if (c.on_int8) int8_flops += c.flops;
        r.parts.push_back(t);
    }
    // The phase's compute roof: the one most of its FLOPs run on.
    r.peak_compute = int8_flops > flops / 2 ? int8 : f16;
    r.ridge = r.peak_compute / r.bandwidth;
    r.intensity = bytes > 0 ? flops / bytes : 0;
    r.attainable = std::min(r.peak_compute, r.intensity * r.bandwidth);
    r.bound = r.intensity * r.bandwidth < r.peak_compute ? "memory" : "compute";
    r.time_aggregate_s = (r.attainable > 0 ? flops / r.attainable : 0) + comm_total + r.overhead_s;
    r.tokens_per_s = r.time_s > 0 ? double(cost.tokens) / r.time_s : 0;
    return r;
}

}  // namespace aqpim
