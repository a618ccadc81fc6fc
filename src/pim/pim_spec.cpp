// Loading and validating DRAM/PIM presets (include/aqpim/pim_spec.h).
#include "aqpim/pim_spec.h"

#include <cmath>

#include "aqpim/error.h"

namespace aqpim {

std::string_view placement_name(PimPlacement p) {
    switch (p) {
        case PimPlacement::bank: return "bank";
        case PimPlacement::bank_group: return "bank_group";
        case PimPlacement::buffer_die: return "buffer";
    }
    return "?";
}

PimPlacement parse_placement(std::string_view s) {
    if (s == "bank") return PimPlacement::bank;
    if (s == "bank_group" || s == "bg") return PimPlacement::bank_group;
    if (s == "buffer" || s == "buffer_die") return PimPlacement::buffer_die;
    AQPIM_FAIL("unknown PIM placement '{}' (expected bank, bank_group or buffer)", s);
}

namespace {

int cycles(const Preset& t, std::string_view f) { return int(t.count(f, 1 << 24)); }

void check_at_least(const Preset& p, std::string_view field, double value, double bound,
                    const std::string& rule) {
    if (value < bound) p.fail(field, fmt::format("is {} but must be at least {} ({})", value, bound, rule));
}

}  // namespace

DramSpec DramSpec::from_preset(const Preset& p) {
    DramSpec s;
    s.name = p.name();
    s.description = p.description();

    const Preset o = p.group("organization");
    s.org.channels = int(o.count("channels", 1 << 12));
    s.org.pseudo_channels = int(o.count("pseudo_channels", 16));
    s.org.ranks = int(o.count("ranks", 16));
    s.org.bank_groups = int(o.count("bank_groups", 64));
    s.org.banks_per_group = int(o.count("banks_per_group", 64));
    s.org.rows = o.count("rows", std::int64_t(1) << 24);
    s.org.columns = int(o.count("columns", 1 << 16));
    s.org.column_bytes = int(o.count("column_bytes", 1 << 12));
    if (o.has("banks")) {
        const std::int64_t banks = o.count("banks", 1 << 20);
        if (banks != std::int64_t(s.org.pseudo_channels) * s.org.ranks * s.org.bank_groups * s.org.banks_per_group)
            o.fail("banks", fmt::format("is {} but pseudo_channels x ranks x bank_groups x banks_per_group = {}",
                                        banks, s.org.banks_per_channel()));
    }
    if (o.has("capacity")) {
        const double cap = o.positive("capacity");
        if (std::abs(cap - double(s.org.device_bytes())) > 1e-6 * cap)
            o.fail("capacity", fmt::format("is {} B but the organization gives {} B", cap, s.org.device_bytes()));
    }

    const Preset t = p.group("timing");
    auto& m = s.timing;
    m.tCK = t.positive("tCK");
    // Every DRAM clock from DDR3 to HBM4 lies between 0.1 and 10 ns.
    if (m.tCK < 5e-11 || m.tCK > 1e-7)
        t.fail("tCK", fmt::format("is {} s, outside the plausible [5e-11, 1e-7] s of a DRAM clock", m.tCK));
    m.nBL = cycles(t, "nBL");
    m.nCL = cycles(t, "nCL");
    m.nRCD = cycles(t, "nRCD");
    m.nRP = cycles(t, "nRP");
    m.nRAS = cycles(t, "nRAS");
    m.nRC = cycles(t, "nRC");
    m.nWR = cycles(t, "nWR");
    m.nCWL = cycles(t, "nCWL");
    m.nRTP_S = cycles(t, "nRTP_S");
    m.nRTP_L = cycles(t, "nRTP_L");
    m.nCCD_S = cycles(t, "nCCD_S");
    m.nCCD_L = cycles(t, "nCCD_L");
    m.nRRD_S = cycles(t, "nRRD_S");
    m.nRRD_L = cycles(t, "nRRD_L");
    m.nWTR_S = cycles(t, "nWTR_S");
    m.nWTR_L = cycles(t, "nWTR_L");
    m.nFAW = cycles(t, "nFAW");
    m.nREFI = cycles(t, "nREFI");
    m.nRFC = cycles(t, "nRFC");
    m.nCCD_AB = cycles(t, "nCCD_AB");
    m.nCCD_AB_cap = cycles(t, "nCCD_AB_cap");
    m.nCCD_SB = cycles(t, "nCCD_SB");
    m.nCCD_SB_cap = cycles(t, "nCCD_SB_cap");
    // tRC = tRAS + tRP in ns; each rounded up to cycles separately may exceed nRC by one (Ramulator2's
    // HBM3 tables: 45 + 19 vs 63), so one cycle of rounding slack is allowed.
    check_at_least(t, "nRC", m.nRC, m.nRAS + m.nRP - 1, "nRAS + nRP, less one cycle of rounding");
    check_at_least(t, "nRAS", m.nRAS, m.nRCD, "a row stays open at least nRCD");
    check_at_least(t, "nCCD_L", m.nCCD_L, m.nCCD_S, "nCCD_S");
    check_at_least(t, "nRRD_L", m.nRRD_L, m.nRRD_S, "nRRD_S");
    check_at_least(t, "nCCD_S", m.nCCD_S, m.nBL, "one burst occupies the data bus for nBL");
    check_at_least(t, "nFAW", m.nFAW, 4 * m.nRRD_S, "4 x nRRD_S");
    check_at_least(t, "nREFI", m.nREFI, m.nRFC + m.nRC, "nRFC + nRC, else refresh never ends");
    check_at_least(t, "nCCD_AB_cap", m.nCCD_AB_cap, m.nCCD_AB, "the cap can only slow MACs down");
    check_at_least(t, "nCCD_SB_cap", m.nCCD_SB_cap, m.nCCD_SB, "the cap can only slow MACs down");
    check_at_least(t, "nCCD_AB", m.nCCD_AB, m.nCCD_L, "an all-bank MAC reads every bank group");

    const Preset e = p.group("energy");
    auto& en = s.energy;
    en.act = e.nonnegative("act");
    en.read_bit = e.nonnegative("read_bit");
    en.write_bit = e.nonnegative("write_bit");
    en.io_bit = e.nonnegative("io_bit");
    en.tsv_bit = e.nonnegative("tsv_bit");
    en.refresh = e.nonnegative("refresh");
    en.pim_mac = e.nonnegative("pim_mac");
    en.buffer_write_bit = e.nonnegative("buffer_write_bit");
    en.lut_access = e.nonnegative("lut_access");
    en.background = e.nonnegative("background");

    const Preset u = p.group("pim");
    s.pim.placement = parse_placement(u.text("placement"));
    s.pim.lanes = int(u.count("lanes", 1 << 12));
    s.pim.buffer_bytes = u.positive("buffer_bytes");
    s.pim.lut_lookups_per_cycle = int(u.count("lut_lookups_per_cycle", 1 << 12));
    s.pim.softmax_elements_per_cycle = u.positive("softmax_elements_per_cycle");
    s.pim.sram_um2_per_byte = u.positive("sram_um2_per_byte");
    if (s.pim.lanes * 2 > s.org.column_bytes)
        u.fail("lanes", fmt::format("is {} but one column holds only {} f16 elements", s.pim.lanes,
                                    s.org.column_bytes / 2));
    return s;
}

DramSpec DramSpec::load(std::string_view name_or_path) { return from_preset(find_preset("dram", name_or_path)); }

double DramSpec::peak_external_bandwidth() const {
    return double(org.channels) * org.pseudo_channels * org.column_bytes / (timing.nBL * timing.tCK);
}

double DramSpec::peak_internal_bandwidth(PimPlacement p) const {
    const double per_channel = [&] {
        switch (p) {
            case PimPlacement::bank:
                return double(org.banks_per_channel()) * org.column_bytes / (nCCD_AB() * timing.tCK);
            case PimPlacement::bank_group:
                return double(org.pseudo_channels) * org.ranks * org.bank_groups * org.column_bytes /
                       (nCCD_SB() * timing.tCK);
            case PimPlacement::buffer_die:
                return double(org.pseudo_channels) * org.column_bytes / (timing.nBL * timing.tCK);
        }
        return 0.0;
    }();
    return per_channel * org.channels;
}

double DramSpec::unloaded_read_latency() const {
    return double(timing.nRCD + timing.nCL + timing.nBL) * timing.tCK;
}

}  // namespace aqpim
