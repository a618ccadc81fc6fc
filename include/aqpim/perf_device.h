#pragma once
// The hardware side of `aqpim roofline`: an accelerator's roofs and links, from a device preset
// (presets/device/NAME.json, shared with `aqpim pimsim`) or measured on this CPU.
//
// Device preset fields (all numbers with a source; the PIM simulator reads the same ones):
//   memory.bandwidth (B/s, peak), memory.capacity (bytes), compute.f16 (dense FLOP/s),
//   compute.int8 (dense OP/s), efficiency.bandwidth / efficiency.compute (achievable fractions,
//   (0, 1]), host_link.bandwidth (B/s) / .latency (s) / .energy_per_bit (J/bit),
//   interconnect.bandwidth (B/s per direction) / .latency (s), power.tdp (W); optional
//   overhead.kernel (s of fixed cost per kernel launch at small batch: launch and dispatch);
//   optional gpu.sm_count and gpu.boost_clock (Hz): the issue rate SMs x clock that a framework's
//   GEMV issue roof (perf_validation.h) scales with; optional gpu.loaded_clock (Hz, at most the
//   boost clock): the clock a card whose board power limit binds holds under a bandwidth-bound
//   load, used for that issue rate instead of the boost clock.
// A processing-in-memory device (kind "pim") adds pim.internal_bandwidth (B/s, all banks) and
// pim.compute (FLOP/s of the bank-side units): weights and KV stream at the internal bandwidth.

#include <string>

#include "aqpim/preset.h"

namespace aqpim {

struct Device {
    std::string name, kind, origin, description;  ///< kind: gpu, tpu, cpu, pim
    double mem_bandwidth = 0;     ///< B/s peak, off-chip (for pim: what the host sees)
    double mem_capacity = 0;      ///< bytes
    double compute_f16 = 0;       ///< FLOP/s dense
    double compute_int8 = 0;      ///< OP/s dense
    double eff_bandwidth = 1;     ///< default achievable fraction of mem_bandwidth
    double eff_compute = 1;       ///< default achievable fraction of compute
    double host_bandwidth = 0, host_latency = 0, host_energy_per_bit = 0;
    double link_bandwidth = 0, link_latency = 0;  ///< interconnect for tensor/pipeline parallelism
    double tdp = 0;               ///< W
    double kernel_overhead = 0;   ///< s per kernel launch (default of PerfRun::kernel_overhead)
    double sm_count = 0;          ///< streaming multiprocessors (0 = not given)
    double sm_clock = 0;          ///< Hz, boost clock of the SMs (0 = not given)
    double sm_loaded_clock = 0;   ///< Hz, SM clock under a power-limited streaming load (= sm_clock unless given)
    double pim_bandwidth = 0;     ///< B/s inside the memory (0 = not a PIM device)
    double pim_compute = 0;       ///< FLOP/s beside the banks

    bool is_pim() const { return pim_bandwidth > 0; }
    /// SM cycles per second over the whole chip under a streaming load (0 if the preset does not
    /// give SMs and clock).
    double issue_rate() const { return sm_count * sm_loaded_clock; }
    /// The bandwidth weights and KV stream at (internal for PIM), peak.
    double stream_bandwidth() const { return is_pim() ? pim_bandwidth : mem_bandwidth; }
    /// The compute roof for a weight/activation precision: int8 when both are <= 8 bits (W8A8,
    /// W4A8, W2A8 run on integer units), else f16 (W4A16 dequantizes to f16); PIM: pim_compute.
    double compute_peak(double weight_bits, double act_bits) const;
    void validate() const;
};

/// A device preset (kind "device"); bad or inconsistent fields: aqpim::Error naming file and field.
Device device_from_preset(const Preset& preset);
/// `--device NAME|FILE.json`; "cpu" measures this machine (measure_cpu_device).
Device find_device(const std::string& name_or_path);
/// This CPU: streaming-read bandwidth measured over a cold buffer with every thread (a quick
/// probe, a few seconds), capacity from /proc/meminfo; the compute roof is an estimate (cores x 3 GHz x
/// 32 f32 FLOP/cycle, AVX2 FMA), stated as such.
Device measure_cpu_device();

}  // namespace aqpim
