// The timing-constraint table of the engine: JEDEC HBM3 (JESD238) rules as Ramulator2 encodes them,
// plus the PIM command rules of AttAcc's HBM3-PIM model (all-bank / same-bank MAC gaps, the
// data-path commands sharing the pseudo channel's bus). One row per rule; docs/pimsim.md lists them.
#include "aqpim/error.h"
#include "aqpim/pim_engine.h"

namespace aqpim {

namespace {
constexpr std::uint32_t bit(PimCmd c) { return 1u << unsigned(c); }
template <class... C> constexpr std::uint32_t mask(C... c) { return (bit(c) | ...); }
}  // namespace

std::string_view cmd_name(PimCmd c) {
    static constexpr std::string_view names[] = {"ACT",   "PRE",   "PREA",  "RD",    "WR",
                                                 "REFab", "ACTAB", "MACAB", "ACTSB", "PRESB",
                                                 "MACSB", "WRGB",  "MVSB",  "MVGB",  "SFM"};
    static_assert(std::size(names) == kPimCmdCount);
    return names[int(c)];
}

PimCmd parse_cmd(std::string_view s) {
    for (int i = 0; i < kPimCmdCount; ++i)
        if (cmd_name(PimCmd(i)) == s) return PimCmd(i);
    AQPIM_FAIL("unknown DRAM/PIM command '{}'", s);
}

std::string_view level_name(PimLevel l) {
    static constexpr std::string_view names[] = {"channel", "pseudo_channel", "rank", "bank_group", "bank"};
    return names[int(l)];
}

std::vector<PimConstraint> pim_constraints(const DramSpec& spec) {
    using C = PimCmd;
    using L = PimLevel;
    const DramTiming& t = spec.timing;
    const std::uint32_t acts = mask(C::ACT, C::ACTAB, C::ACTSB);
    const std::uint32_t pres = mask(C::PRE, C::PREA, C::PRESB);
    const std::uint32_t row_cmds = acts | pres | bit(C::REFab);
    const std::uint32_t col_cmds =
        mask(C::RD, C::WR, C::MACAB, C::MACSB, C::WRGB, C::MVSB, C::MVGB, C::SFM);
    const std::uint32_t data = mask(C::RD, C::WR, C::WRGB, C::MVSB, C::MVGB, C::SFM);
    const int wr_to_pre = t.nCWL + t.nBL + t.nWR;
    return {
        // command buses: a row command takes the row bus 1 cycle (ACT 2), a column command 1
        {L::channel, acts, row_cmds, 2, 1, "ACT 2-cycle"},
        {L::channel, pres | bit(C::REFab), row_cmds, 1, 1, "row bus"},
        {L::channel, col_cmds, col_cmds, 1, 1, "column bus"},
        // all-bank PIM (whole channel)
        {L::channel, bit(C::MACAB), bit(C::MACAB), spec.nCCD_AB(), 1, "nCCD_AB"},
        {L::channel, bit(C::ACTAB), bit(C::ACTAB), t.nRC, 1, "nRC"},
        {L::channel, bit(C::ACTAB), bit(C::MACAB), t.nRCD, 1, "nRCD"},
        {L::channel, mask(C::ACTAB, C::ACT, C::ACTSB), bit(C::PREA), t.nRAS, 1, "nRAS"},
        {L::channel, mask(C::MACAB, C::MACSB), bit(C::PREA), t.nRTP_L, 1, "nRTP_L"},
        {L::channel, bit(C::RD), bit(C::PREA), t.nRTP_S, 1, "nRTP_S"},
        {L::channel, bit(C::WR), bit(C::PREA), wr_to_pre, 1, "nCWL+nBL+nWR"},
        {L::channel, bit(C::PREA), acts, t.nRP, 1, "nRP"},
        // same-bank PIM: one MAC column in bank b of every bank group
        {L::channel, bit(C::MACSB), bit(C::MACSB), spec.nCCD_SB(), 1, "nCCD_SB"},
        {L::bank, bit(C::ACTSB), bit(C::ACTSB), t.nRC, 1, "nRC"},
        {L::bank, bit(C::ACTSB), bit(C::MACSB), t.nRCD, 1, "nRCD"},
        {L::bank, bit(C::ACTSB), bit(C::PRESB), t.nRAS, 1, "nRAS"},
        {L::bank, bit(C::MACSB), bit(C::PRESB), t.nRTP_L, 1, "nRTP_L"},
        {L::bank, bit(C::PRESB), bit(C::ACTSB), t.nRP, 1, "nRP"},
        // refresh (all banks of the channel)
        {L::channel, acts, bit(C::REFab), t.nRC, 1, "nRC"},
        {L::channel, pres, bit(C::REFab), t.nRP, 1, "nRP"},
        {L::channel, bit(C::REFab), acts | bit(C::REFab), t.nRFC, 1, "nRFC"},
        // data path of a pseudo channel (reads, writes and AttAcc's buffer moves share it)
        {L::pseudo_channel, data, data, t.nBL, 1, "nBL"},
        {L::rank, data, data, t.nCCD_S, 1, "nCCD_S"},
        {L::bank_group, data, data, t.nCCD_L, 1, "nCCD_L"},
        {L::rank, bit(C::RD), bit(C::WR), t.nCL + t.nBL + 2 - t.nCWL, 1, "nCL+nBL+2-nCWL"},
        {L::rank, bit(C::WR), bit(C::RD), t.nCWL + t.nBL + t.nWTR_S, 1, "nCWL+nBL+nWTR_S"},
        {L::bank_group, bit(C::WR), bit(C::RD), t.nCWL + t.nBL + t.nWTR_L, 1, "nCWL+nBL+nWTR_L"},
        // activations
        {L::rank, bit(C::ACT), bit(C::ACT), t.nRRD_S, 1, "nRRD_S"},
        {L::bank_group, bit(C::ACT), bit(C::ACT), t.nRRD_L, 1, "nRRD_L"},
        {L::rank, bit(C::ACT), bit(C::ACT), t.nFAW, 4, "nFAW"},
        // one bank
        {L::bank, bit(C::ACT), bit(C::ACT), t.nRC, 1, "nRC"},
        {L::bank, bit(C::ACT), mask(C::RD, C::WR), t.nRCD, 1, "nRCD"},
        {L::bank, bit(C::ACT), bit(C::PRE), t.nRAS, 1, "nRAS"},
        {L::bank, bit(C::PRE), bit(C::ACT), t.nRP, 1, "nRP"},
        {L::bank, bit(C::RD), bit(C::PRE), t.nRTP_L, 1, "nRTP_L"},
        {L::bank, bit(C::WR), bit(C::PRE), wr_to_pre, 1, "nCWL+nBL+nWR"},
    };
}

}  // namespace aqpim
