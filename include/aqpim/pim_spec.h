#pragma once
// DRAM/PIM specifications for `aqpim pimsim`: organization, timing (in clock cycles), energy per
// command and the PIM units, read from one preset of kind "dram" (presets/dram/<name>.json,
// format in include/aqpim/preset.h, fields in docs/pimsim.md). Loading validates every field and
// the cross-field rules (nRC >= nRAS + nRP, ...); errors name the preset and the field.

#include <cstdint>
#include <string>
#include <string_view>

#include "aqpim/preset.h"

namespace aqpim {

/// Where the PIM compute units sit: one per bank, one per bank group (shared by its banks), or on
/// the buffer (logic) die, fed by ordinary reads over each pseudo channel's internal bus.
enum class PimPlacement { bank, bank_group, buffer_die };
std::string_view placement_name(PimPlacement p);
PimPlacement parse_placement(std::string_view s);  ///< "bank", "bank_group"/"bg", "buffer"; error otherwise

/// One memory device (stack or chip) and its PIM units. Counts per device; a channel holds
/// pseudo_channels x ranks x bank_groups x banks_per_group banks.
struct DramOrg {
    int channels = 0;           ///< independent channels per device
    int pseudo_channels = 1;    ///< per channel (HBM pseudo channels; 1 for GDDR6)
    int ranks = 1;              ///< stack IDs per pseudo channel
    int bank_groups = 0;        ///< per rank
    int banks_per_group = 0;
    std::int64_t rows = 0;      ///< per bank
    int columns = 0;            ///< column accesses per row
    int column_bytes = 0;       ///< bytes one column access moves (burst of one pseudo channel)
    int banks_per_channel() const { return pseudo_channels * ranks * bank_groups * banks_per_group; }
    std::int64_t row_bytes() const { return std::int64_t(columns) * column_bytes; }
    std::uint64_t channel_bytes() const {
        return std::uint64_t(banks_per_channel()) * std::uint64_t(rows) * std::uint64_t(row_bytes());
    }
    std::uint64_t device_bytes() const { return channel_bytes() * std::uint64_t(channels); }
};

/// Timing parameters in cycles of tCK (JEDEC names; _S different / _L same bank group).
struct DramTiming {
    double tCK = 0;             ///< seconds per command clock
    int nBL = 0, nCL = 0, nRCD = 0, nRP = 0, nRAS = 0, nRC = 0, nWR = 0, nCWL = 0;
    int nRTP_S = 0, nRTP_L = 0, nCCD_S = 0, nCCD_L = 0, nRRD_S = 0, nRRD_L = 0;
    int nWTR_S = 0, nWTR_L = 0, nFAW = 0, nREFI = 0, nRFC = 0;
    /// Issue gap between consecutive all-bank (AB) and same-bank (SB) PIM MAC commands, without
    /// and with the power cap that limits how many banks compute at once.
    int nCCD_AB = 0, nCCD_AB_cap = 0, nCCD_SB = 0, nCCD_SB_cap = 0;
};

/// Energy per event, joules (and watts for background).
struct DramEnergy {
    double act = 0;             ///< one ACT + PRE of one bank (row of row_bytes)
    double read_bit = 0;        ///< moving one bit from the array to the bank edge (per column access)
    double write_bit = 0;       ///< writing one bit into the array
    double io_bit = 0;          ///< moving one bit across the device interface (to the host / GPU)
    double tsv_bit = 0;         ///< moving one bit from a bank to the buffer (logic) die
    double refresh = 0;         ///< one all-bank refresh of one channel
    double pim_mac = 0;         ///< one f16 multiply-accumulate in a PIM unit
    double buffer_write_bit = 0;///< writing one bit into a PIM unit's local buffer (GEMV buffer / LUT)
    double lut_access = 0;      ///< one lookup-table read (SRAM) plus its accumulate
    double background = 0;      ///< watts per channel while the device is on
};

struct PimUnits {
    PimPlacement placement = PimPlacement::bank;  ///< the device's own placement
    int lanes = 0;              ///< f16 MACs per unit per column access (elements of one column)
    double buffer_bytes = 0;    ///< local buffer (GEMV buffer / LUT SRAM) per unit
    int lut_lookups_per_cycle = 0; ///< LUT reads per unit per cycle (PQ: codes consumed per cycle)
    double softmax_elements_per_cycle = 0;  ///< exp/normalize throughput per channel (logic die)
    double sram_um2_per_byte = 0;   ///< SRAM area per byte in the DRAM process (area estimate)
};

class DramSpec {
public:
    static DramSpec from_preset(const Preset& p);
    /// find_preset("dram", name_or_path) then from_preset.
    static DramSpec load(std::string_view name_or_path);

    std::string name, description;
    DramOrg org;
    DramTiming timing;
    DramEnergy energy;
    PimUnits pim;
    bool power_cap = true;      ///< use the capped nCCD_AB / nCCD_SB

    int nCCD_AB() const { return power_cap ? timing.nCCD_AB_cap : timing.nCCD_AB; }
    int nCCD_SB() const { return power_cap ? timing.nCCD_SB_cap : timing.nCCD_SB; }
    /// External (pin) bandwidth of the device, bytes/s: every pseudo channel moves column_bytes per nBL.
    double peak_external_bandwidth() const;
    /// Internal bandwidth reaching the PIM units at a placement, bytes/s, ignoring row overheads:
    /// bank: every bank a column per nCCD_AB; bank group: one bank per group per nCCD_SB; buffer
    /// die: the pseudo channels' internal buses (column_bytes per nBL each).
    double peak_internal_bandwidth(PimPlacement p) const;
    /// Unloaded read latency of a closed bank: tRCD + tCL + tBL, seconds.
    double unloaded_read_latency() const;
};

}  // namespace aqpim
