#pragma once
// What `aqpim pimsim` computes for one configuration, and its table and JSON forms.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "aqpim/pim_attention.h"
#include "aqpim/pim_baseline.h"

namespace aqpim::cli {

struct PimsimRun {
    PimResult result;
    double wall_seconds = 0;   ///< host time the simulation took
    std::string workload;      ///< fp16 / pq (also when it did not fit)
    PimPlacement placement = PimPlacement::bank;
    std::string does_not_fit;  ///< why the KV cache does not fit in the PIM devices ("" = simulated)
};

struct PimsimCapacity {
    double capacity = 0;                  ///< PIM bytes available for the KV cache
    double f16_bytes_per_seq = 0, pq_bytes_per_seq = 0;
    double pq_bits_per_element = 0;
    std::int64_t f16_batch = 0, pq_batch = 0;         ///< sequences of `context` tokens that fit
    std::int64_t f16_max_context = 0, pq_max_context = 0;  ///< tokens one sequence can hold (batch 1)
};

struct PimsimGpu {
    std::string device;
    GpuAttentionCost f16, pq;
    double resident_capacity = 0;
};

struct PimsimReport {
    std::string dram, model;
    PimAttentionShape shape;
    bool power_cap = true;
    std::vector<PimsimRun> runs;
    PimsimCapacity capacity;
    std::optional<PimsimGpu> gpu;
};

void print_pimsim_table(const PimsimReport& r);
nlohmann::ordered_json pimsim_json(const PimsimReport& r);

}  // namespace aqpim::cli
