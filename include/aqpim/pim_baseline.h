#pragma once
// Baselines for `aqpim pimsim`: the GPU reading the KV cache over its memory interface (roofline),
// the capacity wall (KV that does not fit spills to host memory and streams over PCIe/CXL every
// step, FlexGen-style), and the capacity view (context and batch that fit with f16 vs PQ KV).
// Device numbers: aqpim::Device of the roofline model (presets/device/<name>.json, aqpim/perf_device.h).

#include <cstdint>

#include "aqpim/perf_device.h"

namespace aqpim {

/// One decode step's attention on the GPU: read kv_bytes at memory bandwidth x its efficiency, or compute
/// `flops`, whichever is longer; KV beyond `resident_capacity` streams over the host link first
/// (no overlap, the FlexGen worst case), once per step.
struct GpuAttentionCost {
    double seconds = 0, hbm_seconds = 0, compute_seconds = 0, link_seconds = 0;
    double spilled_bytes = 0;
    double link_share = 0;        ///< link_seconds / seconds
    double energy = 0;            ///< J: TDP x time (upper bound) + link bits
};
GpuAttentionCost gpu_attention_cost(const Device& dev, double kv_bytes, double flops, double resident_capacity);

/// Largest n such that fixed + n * per_item <= capacity (0 if none).
std::int64_t fit_count(double capacity, double fixed, double per_item);

}  // namespace aqpim
