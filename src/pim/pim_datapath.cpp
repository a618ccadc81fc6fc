// Shared pieces of the attention mappings (src/pim/pim_datapath.h) and the energy model.
#include "pim_datapath.h"

#include <algorithm>

#include "aqpim/error.h"

namespace aqpim {

namespace pim_detail {

std::int64_t heads_on_busiest_channel(const DramSpec& spec, const PimAttentionShape& shape) {
    AQPIM_CHECK(shape.kv_heads > 0, "no KV heads to simulate (kv_heads = {})", shape.kv_heads);
    AQPIM_CHECK(shape.devices > 0, "devices must be positive, got {}", shape.devices);
    AQPIM_CHECK(shape.context > 0, "context must be positive, got {}", shape.context);
    AQPIM_CHECK(shape.head_dim > 0 && shape.group > 0, "head_dim {} and group {} must be positive", shape.head_dim,
                shape.group);
    return ceil_div(shape.kv_heads, std::int64_t(spec.org.channels) * shape.devices);
}

std::int64_t issue_datapath(PimChannel& ch, PimCmd c, std::int64_t n, std::int64_t not_before) {
    const DramOrg& o = ch.spec().org;
    std::int64_t t = not_before;
    for (std::int64_t i = 0; i < n; ++i) {
        PimAddr a;
        a.pch = int(i % o.pseudo_channels);
        a.bg = int((i / o.pseudo_channels) % o.bank_groups);
        t = ch.issue(c, a, i == 0 ? not_before : 0);
    }
    return t;
}

int unit_gap(std::int64_t ops, std::int64_t per_cycle, int min_gap) {
    const std::int64_t g = ceil_div(ops, per_cycle);
    return g > min_gap ? int(g) : 0;
}

int column_gap(const DramSpec& spec, PimPlacement p) {
    switch (p) {
        case PimPlacement::bank: return spec.nCCD_AB();
        case PimPlacement::bank_group: return spec.nCCD_SB();
        case PimPlacement::buffer_die: return spec.timing.nBL;
    }
    return 1;
}

int units_per_channel(const DramSpec& spec, PimPlacement p) {
    const DramOrg& o = spec.org;
    switch (p) {
        case PimPlacement::bank: return o.banks_per_channel();
        case PimPlacement::bank_group: return o.pseudo_channels * o.ranks * o.bank_groups;
        case PimPlacement::buffer_die: return o.pseudo_channels;
    }
    return 1;
}

void finish_result(PimResult& r, const PimChannel& ch, const PimAttentionShape& shape, double bytes_read,
                   double pim_ops, double op_energy, double io_bytes) {
    const DramSpec& s = ch.spec();
    r.cycles = ch.finish();
    r.seconds = double(r.cycles) * s.timing.tCK;
    r.phases = ch.phase_cycles();
    r.counts = ch.counts();
    r.bytes_read = bytes_read;
    r.internal_bandwidth = bytes_read / r.seconds;
    const double scale = double(shape.kv_heads) / double(r.heads_per_channel);
    // Background power runs on every channel of every device for the whole step.
    r.energy = pim_energy(s, r.placement, r.counts, scale, r.seconds * shape.devices, pim_ops, op_energy, io_bytes);
    // Every channel refreshes, busy or not.
    r.energy.refresh = double(r.counts[int(PimCmd::REFab)]) * s.org.channels * shape.devices * s.energy.refresh;
}

}  // namespace pim_detail

PimEnergy pim_energy(const DramSpec& spec, PimPlacement placement, const std::array<std::int64_t, kPimCmdCount>& n,
                     double scale, double seconds, double pim_ops, double op_energy, double io_bytes) {
    const DramOrg& o = spec.org;
    const DramEnergy& e = spec.energy;
    auto cnt = [&](PimCmd c) { return double(n[int(c)]) * scale; };
    const double sb_banks = double(o.pseudo_channels) * o.ranks * o.bank_groups;
    const double col_bits = double(o.column_bytes) * 8;
    PimEnergy r;
    // ACTAB opens every bank, ACTSB one bank per group; refresh-restores are counted the same way.
    r.activate = e.act * (cnt(PimCmd::ACT) + cnt(PimCmd::ACTAB) * o.banks_per_channel() + cnt(PimCmd::ACTSB) * sb_banks);
    const double array_cols = cnt(PimCmd::RD) + cnt(PimCmd::MACAB) * o.banks_per_channel() + cnt(PimCmd::MACSB) * sb_banks;
    r.read = array_cols * col_bits * e.read_bit + cnt(PimCmd::WR) * col_bits * e.write_bit;
    // Reads to the buffer die and the data-path moves cross the TSVs.
    const double tsv_cols = (placement == PimPlacement::buffer_die ? cnt(PimCmd::RD) : 0.0) + cnt(PimCmd::MVSB) +
                            cnt(PimCmd::MVGB) + cnt(PimCmd::WRGB);
    r.read += tsv_cols * col_bits * e.tsv_bit;
    r.compute = pim_ops * op_energy;
    // Buffer writes: WRGB/MVGB broadcast to every unit of the channel.
    r.buffer = (cnt(PimCmd::WRGB) + cnt(PimCmd::MVGB)) * col_bits * e.buffer_write_bit *
               (placement == PimPlacement::buffer_die ? 1.0 : double(o.banks_per_channel()));
    r.io = io_bytes * 8 * e.io_bit;
    r.refresh = cnt(PimCmd::REFab) * e.refresh;
    r.background = e.background * o.channels * seconds;
    return r;
}

}  // namespace aqpim
