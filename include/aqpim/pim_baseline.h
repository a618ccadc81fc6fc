#pragma once
// Baselines for `aqpim pimsim`: the GPU reading the KV cache over its memory interface (roofline),
// the capacity wall (KV that does not fit spills to host memory and streams over PCIe/CXL every
// step, FlexGen-style), and the capacity view (context and batch that fit with f16 vs PQ KV).
// Device numbers come from presets/device/<name>.json (fields listed in docs/pimsim.md).

#include <cstdint>
#include <string>
#include <string_view>

namespace aqpim {

/// The fields of a device preset that the PIM baselines read.
struct PimHostDevice {
    std::string name;
    double mem_bandwidth = 0;     ///< B/s (memory.bandwidth)
    double mem_capacity = 0;      ///< B (memory.capacity)
    double f16_flops = 0;         ///< FLOP/s (compute.f16)
    double bw_efficiency = 1;     ///< achievable fraction of mem_bandwidth (efficiency.bandwidth)
    double link_bandwidth = 0;    ///< host link B/s (host_link.bandwidth)
    double link_latency = 0;      ///< s (host_link.latency)
    double link_energy_bit = 0;   ///< J/bit (host_link.energy_per_bit)
    double tdp = 0;               ///< W (power.tdp)
    static PimHostDevice load(std::string_view name_or_path);
};

/// One decode step's attention on the GPU: read kv_bytes at bandwidth x efficiency, or compute
/// `flops`, whichever is longer; KV beyond `resident_capacity` streams over the host link first
/// (no overlap, the FlexGen worst case), once per step.
struct GpuAttentionCost {
    double seconds = 0, hbm_seconds = 0, compute_seconds = 0, link_seconds = 0;
    double spilled_bytes = 0;
    double link_share = 0;        ///< link_seconds / seconds
    double energy = 0;            ///< J: TDP x time (upper bound) + link bits
};
GpuAttentionCost gpu_attention_cost(const PimHostDevice& dev, double kv_bytes, double flops, double resident_capacity);

/// Largest n such that fixed + n * per_item <= capacity (0 if none).
std::int64_t fit_count(double capacity, double fixed, double per_item);

}  // namespace aqpim
