#pragma once
// Command-level DRAM/PIM engine: one channel (all its pseudo channels, ranks, bank groups and
// banks), bank state machines, every timing constraint of the spec, all-bank refresh, all-bank
// (AB), same-bank (SB) and per-bank PIM commands. Commands issue in order (a PIM command queue, as
// in AttAcc's controller), each at the earliest cycle every constraint allows. The constraint
// table is data (pim_constraints()), printed by `aqpim pimsim --constraints` and documented in
// docs/pimsim.md.

#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "aqpim/pim_spec.h"

namespace aqpim {

enum class PimCmd : std::uint8_t {
    ACT, PRE, PREA, RD, WR, REFab,     // standard DRAM commands (PREA closes every bank of the channel)
    ACTAB, MACAB,                      // all-bank PIM: open one row in every bank / one MAC column in every bank
    ACTSB, PRESB, MACSB,               // same-bank PIM: bank index b of every bank group
    WRGB, MVSB, MVGB, SFM,             // data path: write GEMV/LUT buffer, move to softmax buffer, move to GEMV buffer, softmax
    count
};
constexpr int kPimCmdCount = int(PimCmd::count);
std::string_view cmd_name(PimCmd c);
PimCmd parse_cmd(std::string_view s);  ///< error naming the unknown command

enum class PimLevel : std::uint8_t { channel, pseudo_channel, rank, bank_group, bank };
std::string_view level_name(PimLevel l);

/// A command's target. For AB and channel commands only `row` matters; SB commands use bank + row.
struct PimAddr {
    int pch = 0, rank = 0, bg = 0, bank = 0;
    std::int64_t row = 0;
    int col = 0;
};

/// "A `next` command to the same node at `level` may issue no earlier than `latency` cycles after
/// a `prev` command" (window w > 1: after the w-th most recent `prev`).
struct PimConstraint {
    PimLevel level;
    std::uint32_t prev, next;   ///< bit masks over PimCmd
    int latency;
    int window = 1;
    std::string name;           ///< e.g. "nRCD", "nFAW"
};
std::vector<PimConstraint> pim_constraints(const DramSpec& spec);

class PimChannel {
public:
    struct Options {
        bool refresh = true;    ///< insert all-bank refreshes every nREFI (closing and reopening rows)
        std::ostream* trace = nullptr;  ///< command trace (docs/pimsim.md "Command trace")
    };
    PimChannel(const DramSpec& spec, Options opt);
    explicit PimChannel(const DramSpec& spec) : PimChannel(spec, Options{}) {}

    /// Earliest cycle the timing constraints allow `c` (not earlier than the last issued command).
    /// Throws aqpim::Error if the bank states forbid it (e.g. RD to a closed bank).
    std::int64_t earliest(PimCmd c, const PimAddr& a) const;
    bool ready(PimCmd c, const PimAddr& a, std::int64_t t) const { return t >= earliest(c, a); }
    /// Issue at exactly cycle t; error if t < earliest(c, a). No refresh is inserted.
    void issue_at(PimCmd c, const PimAddr& a, std::int64_t t);
    /// Issue at the earliest legal cycle >= not_before, first refreshing if one is due. Returns the cycle.
    std::int64_t issue(PimCmd c, const PimAddr& a, std::int64_t not_before = 0);

    std::int64_t last_issue() const { return last_; }
    /// Wait (no command) until cycle t, e.g. for a result computed outside the DRAM; the wait goes
    /// to the current phase.
    void idle_until(std::int64_t t);
    /// Cycle by which the last issued command's data has arrived (last issue + nCL + nBL).
    std::int64_t finish() const;
    const std::array<std::int64_t, kPimCmdCount>& counts() const { return counts_; }
    std::int64_t count(PimCmd c) const { return counts_[int(c)]; }
    /// Open row of a bank (-1 closed).
    std::int64_t open_row(const PimAddr& a) const { return open_[bank_index(a)]; }
    const DramSpec& spec() const { return spec_; }

    /// Phase accounting: the cycles by which each issued command advances the channel's clock go
    /// to the current phase (refreshes to "refresh"); the phases sum to last_issue().
    void set_phase(std::string_view name);
    const std::vector<std::pair<std::string, std::int64_t>>& phase_cycles() const { return phases_; }

private:
    int bank_index(const PimAddr& a) const;
    int node_index(PimLevel l, const PimAddr& a) const;
    void check_state(PimCmd c, const PimAddr& a) const;
    void apply_state(PimCmd c, const PimAddr& a);
    template <class F> void for_nodes(PimCmd c, const PimAddr& a, PimLevel l, F&& f) const;
    void refresh_now(std::int64_t not_before);

    DramSpec spec_;
    Options opt_;
    std::vector<PimConstraint> cons_;
    std::array<std::vector<int>, kPimCmdCount> by_prev_;       ///< constraint indices per prev command
    std::array<std::uint8_t, kPimCmdCount> next_levels_{};     ///< levels (bit mask) where c is a `next`
    std::array<int, 5> n_nodes_{};
    /// next_[level][node * kPimCmdCount + cmd]: earliest cycle for cmd at that node.
    std::array<std::vector<std::int64_t>, 5> next_;
    /// Window histories: per windowed constraint, per node, the last `window` prev issue times.
    std::vector<std::vector<std::vector<std::int64_t>>> hist_;
    std::vector<std::int64_t> open_;     ///< [bank] open row or -1
    std::vector<PimCmd> opener_;         ///< [bank] the command that opened it (restored after refresh)
    std::int64_t last_ = 0;
    std::int64_t next_refresh_ = 0;
    std::array<std::int64_t, kPimCmdCount> counts_{};
    std::vector<std::pair<std::string, std::int64_t>> phases_;
    int phase_ = -1;
    int phase_index(std::string_view name);
};

}  // namespace aqpim
