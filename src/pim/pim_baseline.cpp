// GPU, offload and capacity baselines of `aqpim pimsim` (include/aqpim/pim_baseline.h).
#include "aqpim/pim_baseline.h"

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"

namespace aqpim {

GpuAttentionCost gpu_attention_cost(const Device& dev, double kv_bytes, double flops, double resident_capacity) {
    AQPIM_CHECK(kv_bytes >= 0 && flops >= 0, "negative work (kv_bytes {}, flops {})", kv_bytes, flops);
    GpuAttentionCost c;
    c.spilled_bytes = std::max(0.0, kv_bytes - std::max(0.0, resident_capacity));
    c.hbm_seconds = kv_bytes / (dev.mem_bandwidth * dev.eff_bandwidth);
    c.compute_seconds = flops / dev.compute_f16;
    c.link_seconds = c.spilled_bytes > 0 ? c.spilled_bytes / dev.host_bandwidth + dev.host_latency : 0.0;
    c.seconds = std::max(c.hbm_seconds, c.compute_seconds) + c.link_seconds;
    c.link_share = c.seconds > 0 ? c.link_seconds / c.seconds : 0.0;
    c.energy = dev.tdp * c.seconds + c.spilled_bytes * 8 * dev.host_energy_per_bit;
    return c;
}

std::int64_t fit_count(double capacity, double fixed, double per_item) {
    AQPIM_CHECK(per_item > 0, "per-item bytes must be positive, got {}", per_item);
    if (capacity <= fixed) return 0;
    return std::int64_t(std::floor((capacity - fixed) / per_item));
}

}  // namespace aqpim
