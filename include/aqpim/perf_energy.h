#pragma once
// Energy per token of `aqpim roofline --table energy`: per-operation energies by memory level and
// process node from an energy preset (presets/energy/NAME.json), applied to a phase's FLOPs and
// bytes (roofline.h). Energy preset fields (J per unit, each with a source):
//   dram.access (J/byte read from HBM/DRAM, row activation to the processor's pins included),
//   dram.in_array_fraction (share of dram.access spent inside the DRAM array: what stays when the
//   computation moves into the memory), l2.access (J/byte through the last-level cache),
//   compute.f16 (J/FLOP on the f16 roof), compute.int8 (J/OP on the integer roof),
//   link.access (J/byte over the interconnect).

#include <string>
#include <vector>

#include "aqpim/preset.h"
#include "aqpim/roofline.h"

namespace aqpim {

struct EnergyTable {
    std::string name, origin, description;
    double dram = 0;                ///< J/byte
    double dram_in_array = 1;       ///< fraction of dram spent in the array
    double l2 = 0;                  ///< J/byte
    double flop_f16 = 0;            ///< J/FLOP
    double op_int8 = 0;             ///< J/OP
    double link = 0;                ///< J/byte
};

EnergyTable energy_table_from_preset(const Preset& preset);
EnergyTable find_energy_table(const std::string& name_or_path);

/// Energy of one phase (J, per device), by part.
struct EnergyBreakdown {
    double weights = 0;   ///< DRAM reads of weights
    double kv = 0;        ///< DRAM reads and writes of the KV cache
    double l2 = 0;        ///< every DRAM byte and activation through L2
    double compute = 0;
    double other = 0;     ///< activations in DRAM, interconnect
    double total() const { return weights + kv + l2 + compute + other; }
    /// What computing in memory could remove: the off-array part of weight and KV reads and their
    /// trip through L2 (the array access itself stays).
    double pim_removable = 0;
};

EnergyBreakdown phase_energy(const PhaseCost& cost, const EnergyTable& table);

}  // namespace aqpim
