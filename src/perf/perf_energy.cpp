// Energy per phase from an energy table (include/aqpim/perf_energy.h).

#include "aqpim/perf_energy.h"

#include "aqpim/error.h"

namespace aqpim {

EnergyTable energy_table_from_preset(const Preset& p) {
    EnergyTable t;
    t.name = p.name();
    t.origin = p.origin();
    t.description = p.description();
    t.dram = p.positive("dram.access");
    t.dram_in_array = p.positive("dram.in_array_fraction");
    if (t.dram_in_array > 1) p.fail("dram.in_array_fraction", fmt::format("a fraction in (0, 1], is {}", t.dram_in_array));
    t.l2 = p.nonnegative("l2.access");
    t.flop_f16 = p.positive("compute.f16");
    t.op_int8 = p.positive("compute.int8");
    t.link = p.nonnegative("link.access");
    if (t.l2 >= t.dram) p.fail("l2.access", fmt::format("{} J/byte is not below dram.access {} J/byte", t.l2, t.dram));
    return t;
}

EnergyTable find_energy_table(const std::string& name_or_path) {
    return energy_table_from_preset(find_preset("energy", name_or_path));
}

EnergyBreakdown phase_energy(const PhaseCost& cost, const EnergyTable& t) {
    EnergyBreakdown e;
    for (const Cost& c : cost.parts) {
        e.weights += c.weight_bytes * t.dram;
        e.kv += c.kv_bytes * t.dram;
        e.l2 += c.mem_bytes() * t.l2;
        e.compute += c.flops * (c.on_int8 ? t.op_int8 : t.flop_f16);
        e.other += c.act_bytes * t.dram + c.comm_bytes * t.link;
        e.pim_removable += (c.weight_bytes + c.kv_bytes) * (t.dram * (1 - t.dram_in_array) + t.l2);
    }
    return e;
}

}  // namespace aqpim
