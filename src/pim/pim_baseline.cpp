// GPU, offload and capacity baselines of `aqpim pimsim` (include/aqpim/pim_baseline.h).
#include "aqpim/pim_baseline.h"

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/perf_device.h"
#include "aqpim/preset.h"

namespace aqpim {

PimHostDevice PimHostDevice::load(std::string_view name_or_path) {
    // One reader of device presets: the roofline's (include/aqpim/perf_device.h).
    const Device dev = device_from_preset(find_preset("device", name_or_path));
    PimHostDevice d;
    d.name = dev.name;
    d.mem_bandwidth = dev.mem_bandwidth;
    d.mem_capacity = dev.mem_capacity;
    d.f16_flops = dev.compute_f16;
    d.bw_efficiency = dev.eff_bandwidth;
    d.link_bandwidth = dev.host_bandwidth;
    d.link_latency = dev.host_latency;
    d.link_energy_bit = dev.host_energy_per_bit;
    d.tdp = dev.tdp;
    AQPIM_CHECK(d.mem_bandwidth > 0 && d.mem_capacity > 0 && d.f16_flops > 0 && d.link_bandwidth > 0 && d.tdp > 0,
                "device {}: the PIM baselines need memory.bandwidth, memory.capacity, compute.f16, "
                "host_link.bandwidth and power.tdp", d.name);
    return d;
}

GpuAttentionCost gpu_attention_cost(const PimHostDevice& dev, double kv_bytes, double flops, double resident_capacity) {
    AQPIM_CHECK(kv_bytes >= 0 && flops >= 0, "negative work (kv_bytes {}, flops {})", kv_bytes, flops);
    GpuAttentionCost c;
    c.spilled_bytes = std::max(0.0, kv_bytes - std::max(0.0, resident_capacity));
    c.hbm_seconds = kv_bytes / (dev.mem_bandwidth * dev.bw_efficiency);
    c.compute_seconds = flops / dev.f16_flops;
    c.link_seconds = c.spilled_bytes > 0 ? c.spilled_bytes / dev.link_bandwidth + dev.link_latency : 0.0;
    c.seconds = std::max(c.hbm_seconds, c.compute_seconds) + c.link_seconds;
    c.link_share = c.seconds > 0 ? c.link_seconds / c.seconds : 0.0;
    c.energy = dev.tdp * c.seconds + c.spilled_bytes * 8 * dev.link_energy_bit;
    return c;
}

std::int64_t fit_count(double capacity, double fixed, double per_item) {
    AQPIM_CHECK(per_item > 0, "per-item bytes must be positive, got {}", per_item);
    if (capacity <= fixed) return 0;
    return std::int64_t(std::floor((capacity - fixed) / per_item));
}

}  // namespace aqpim
