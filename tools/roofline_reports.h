#pragma once
// The tables of `aqpim roofline` (tools/cmd_roofline.cpp): each one a view of the model of
// include/aqpim/roofline.h for one model, device and run.

#include <string>
#include <vector>

#include "aqpim/perf_device.h"
#include "aqpim/perf_model.h"
#include "aqpim/roofline.h"
#include "roofline_table.h"

namespace aqpim::cli {

struct RooflineSetup {
    PerfModel model;
    Device device;
    PerfRun run;
    std::vector<int> batches;               ///< --batches
    std::vector<std::int64_t> contexts;     ///< --contexts
    std::vector<std::string> kv_schemes;    ///< --kv-list (quant table)
    std::vector<std::string> energy_tables; ///< --energy
};

/// Decode and prefill by component, their rooflines, and what fits in memory.
std::vector<Table> summary_tables(const RooflineSetup& s);
Table batch_table(const RooflineSetup& s);
Table context_table(const RooflineSetup& s);
Table quant_table(const RooflineSetup& s);
/// Energy per token by part for each energy table, tokens/J, power at the roofline speed vs TDP.
Table energy_table(const RooflineSetup& s);
/// Every device preset (or the given one) for the model and run.
Table devices_table(const RooflineSetup& s);
/// Published batch-1 decode speeds vs the model: default efficiency, fitted efficiency, errors.
std::vector<Table> validate_tables(const std::string& validation_preset);

}  // namespace aqpim::cli
