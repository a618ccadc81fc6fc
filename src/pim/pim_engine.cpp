// The command-level engine (include/aqpim/pim_engine.h).
#include "aqpim/pim_engine.h"

#include <algorithm>
#include <ostream>

#include "aqpim/error.h"

namespace aqpim {

namespace {

enum class Scope { channel, same_bank, bank };

Scope scope_of(PimCmd c) {
    switch (c) {
        case PimCmd::PREA: case PimCmd::REFab: case PimCmd::ACTAB: case PimCmd::MACAB: return Scope::channel;
        case PimCmd::ACTSB: case PimCmd::PRESB: case PimCmd::MACSB: return Scope::same_bank;
        default: return Scope::bank;
    }
}

}  // namespace

PimChannel::PimChannel(const DramSpec& spec, Options opt) : spec_(spec), opt_(opt), cons_(pim_constraints(spec)) {
    const DramOrg& o = spec_.org;
    n_nodes_ = {1, o.pseudo_channels, o.pseudo_channels * o.ranks, o.pseudo_channels * o.ranks * o.bank_groups,
                o.banks_per_channel()};
    for (int l = 0; l < 5; ++l) next_[l].assign(std::size_t(n_nodes_[l]) * kPimCmdCount, 0);
    hist_.resize(cons_.size());
    for (std::size_t k = 0; k < cons_.size(); ++k) {
        const PimConstraint& ct = cons_[k];
        for (int c = 0; c < kPimCmdCount; ++c) {
            if (ct.prev & (1u << c)) by_prev_[c].push_back(int(k));
            if (ct.next & (1u << c)) next_levels_[c] |= std::uint8_t(1u << int(ct.level));
        }
        if (ct.window > 1) hist_[k].resize(std::size_t(n_nodes_[int(ct.level)]));
    }
    open_.assign(std::size_t(o.banks_per_channel()), -1);
    opener_.assign(std::size_t(o.banks_per_channel()), PimCmd::ACT);
    next_refresh_ = spec_.timing.nREFI;
}

int PimChannel::bank_index(const PimAddr& a) const { return node_index(PimLevel::bank, a); }

int PimChannel::node_index(PimLevel l, const PimAddr& a) const {
    const DramOrg& o = spec_.org;
    switch (l) {
        case PimLevel::channel: return 0;
        case PimLevel::pseudo_channel: return a.pch;
        case PimLevel::rank: return a.pch * o.ranks + a.rank;
        case PimLevel::bank_group: return (a.pch * o.ranks + a.rank) * o.bank_groups + a.bg;
        case PimLevel::bank:
            return ((a.pch * o.ranks + a.rank) * o.bank_groups + a.bg) * o.banks_per_group + a.bank;
    }
    return 0;
}

template <class F>
void PimChannel::for_nodes(PimCmd c, const PimAddr& a, PimLevel l, F&& f) const {
    const Scope s = scope_of(c);
    if (l == PimLevel::channel) return f(0);
    if (s == Scope::bank) return f(node_index(l, a));
    if (s == Scope::same_bank && l == PimLevel::bank) {
        const int per = spec_.org.banks_per_group;
        for (int g = 0; g < n_nodes_[int(PimLevel::bank_group)]; ++g) f(g * per + a.bank);
        return;
    }
    for (int n = 0; n < n_nodes_[int(l)]; ++n) f(n);
}

void PimChannel::check_state(PimCmd c, const PimAddr& a) const {
    const DramOrg& o = spec_.org;
    const Scope s = scope_of(c);
    if (s != Scope::channel) {
        AQPIM_CHECK(a.bank >= 0 && a.bank < o.banks_per_group, "{}: bank {} out of range [0, {})", cmd_name(c), a.bank,
                    o.banks_per_group);
        if (s == Scope::bank) {
            AQPIM_CHECK(a.pch >= 0 && a.pch < o.pseudo_channels && a.rank >= 0 && a.rank < o.ranks && a.bg >= 0 &&
                            a.bg < o.bank_groups,
                        "{}: address pch {} rank {} bg {} out of range", cmd_name(c), a.pch, a.rank, a.bg);
        }
    }
    AQPIM_CHECK(a.row >= 0 && a.row < o.rows, "{}: row {} out of range [0, {})", cmd_name(c), a.row, o.rows);
    AQPIM_CHECK(a.col >= 0 && a.col < o.columns, "{}: column {} out of range [0, {})", cmd_name(c), a.col, o.columns);
    auto each_target = [&](auto&& f) { for_nodes(c, a, PimLevel::bank, f); };
    switch (c) {
        case PimCmd::ACT: case PimCmd::ACTAB: case PimCmd::ACTSB:
            each_target([&](int b) {
                AQPIM_CHECK(open_[b] < 0, "{} to bank {} which has row {} open (precharge first)", cmd_name(c), b, open_[b]);
            });
            break;
        case PimCmd::PRE:
            AQPIM_CHECK(open_[bank_index(a)] >= 0, "PRE to bank {} which is already closed", bank_index(a));
            break;
        case PimCmd::RD: case PimCmd::WR: case PimCmd::MACAB: case PimCmd::MACSB:
            each_target([&](int b) {
                AQPIM_CHECK(open_[b] == a.row, "{} to bank {} row {}: the bank has {}", cmd_name(c), b, a.row,
                            open_[b] < 0 ? std::string("no row open") : fmt::format("row {} open", open_[b]));
            });
            break;
        case PimCmd::REFab:
            for (std::size_t b = 0; b < open_.size(); ++b)
                AQPIM_CHECK(open_[b] < 0, "REFab with bank {} open (precharge all first)", b);
            break;
        default: break;
    }
}

std::int64_t PimChannel::earliest(PimCmd c, const PimAddr& a) const {
    check_state(c, a);
    std::int64_t t = last_;
    const std::uint8_t levels = next_levels_[int(c)];
    for (int l = 0; l < 5; ++l) {
        if (!(levels & (1u << l))) continue;
        const auto& nx = next_[l];
        for_nodes(c, a, PimLevel(l), [&](int n) { t = std::max(t, nx[std::size_t(n) * kPimCmdCount + int(c)]); });
    }
    return t;
}

void PimChannel::apply_state(PimCmd c, const PimAddr& a) {
    switch (c) {
        case PimCmd::ACT: case PimCmd::ACTAB: case PimCmd::ACTSB:
            for_nodes(c, a, PimLevel::bank, [&](int b) { open_[b] = a.row; opener_[b] = c; });
            break;
        case PimCmd::PRE: open_[bank_index(a)] = -1; break;
        case PimCmd::PRESB: case PimCmd::PREA:
            for_nodes(c, a, PimLevel::bank, [&](int b) { open_[b] = -1; });
            break;
        default: break;
    }
}

void PimChannel::issue_at(PimCmd c, const PimAddr& a, std::int64_t t) {
    const std::int64_t e = earliest(c, a);
    AQPIM_CHECK(t >= e, "{} at cycle {} violates timing: earliest legal cycle is {}", cmd_name(c), t, e);
    for (int k : by_prev_[int(c)]) {
        const PimConstraint& ct = cons_[std::size_t(k)];
        auto& nx = next_[int(ct.level)];
        for_nodes(c, a, ct.level, [&](int n) {
            std::int64_t bound = t + ct.latency;
            if (ct.window > 1) {
                auto& h = hist_[std::size_t(k)][std::size_t(n)];
                h.push_back(t);
                if (int(h.size()) > ct.window) h.erase(h.begin());
                if (int(h.size()) < ct.window) return;
                bound = h.front() + ct.latency;
            }
            for (std::uint32_t m = ct.next; m; m &= m - 1) {
                const int f = __builtin_ctz(m);
                std::int64_t& v = nx[std::size_t(n) * kPimCmdCount + f];
                v = std::max(v, bound);
            }
        });
    }
    apply_state(c, a);
    if (phase_ < 0) phase_ = phase_index("other");
    phases_[std::size_t(phase_)].second += t - last_;
    last_ = t;
    ++counts_[int(c)];
    if (opt_.trace)
        *opt_.trace << t << ' ' << cmd_name(c) << ' ' << a.pch << ' ' << a.rank << ' ' << a.bg << ' ' << a.bank << ' '
                    << a.row << ' ' << a.col << '\n';
}

int PimChannel::phase_index(std::string_view name) {
    for (std::size_t i = 0; i < phases_.size(); ++i)
        if (phases_[i].first == name) return int(i);
    phases_.emplace_back(std::string(name), 0);
    return int(phases_.size()) - 1;
}

void PimChannel::set_phase(std::string_view name) { phase_ = phase_index(name); }

void PimChannel::idle_until(std::int64_t t) {
    if (t <= last_) return;
    if (phase_ < 0) phase_ = phase_index("other");
    phases_[std::size_t(phase_)].second += t - last_;
    last_ = t;
}

void PimChannel::refresh_now(std::int64_t not_before) {
    const int saved_phase = phase_;
    phase_ = phase_index("refresh");
    std::vector<std::int64_t> rows = open_;
    std::vector<PimCmd> how = opener_;
    bool any_open = std::any_of(rows.begin(), rows.end(), [](std::int64_t r) { return r >= 0; });
    if (any_open) {
        const PimAddr all{};
        issue_at(PimCmd::PREA, all, std::max(not_before, earliest(PimCmd::PREA, all)));
    }
    issue_at(PimCmd::REFab, PimAddr{}, earliest(PimCmd::REFab, PimAddr{}));
    next_refresh_ += spec_.timing.nREFI;
    // Reopen what was open, with the command that opened it.
    const DramOrg& o = spec_.org;
    for (std::size_t b = 0; b < rows.size(); ++b) {
        if (rows[b] < 0 || open_[b] >= 0) continue;
        PimAddr a;
        int i = int(b);
        a.bank = i % o.banks_per_group; i /= o.banks_per_group;
        a.bg = i % o.bank_groups; i /= o.bank_groups;
        a.rank = i % o.ranks; a.pch = i / o.ranks;
        a.row = rows[b];
        issue_at(how[b], a, earliest(how[b], a));
    }
    phase_ = saved_phase;
}

std::int64_t PimChannel::issue(PimCmd c, const PimAddr& a, std::int64_t not_before) {
    if (opt_.refresh && c != PimCmd::REFab) {
        // A refresh that falls due before this command goes first (rows reopened after it).
        while (std::max(not_before, last_) >= next_refresh_ ||
               std::max(not_before, earliest(c, a)) >= next_refresh_)
            refresh_now(next_refresh_);
    }
    const std::int64_t t = std::max(not_before, earliest(c, a));
    issue_at(c, a, t);
    return t;
}

std::int64_t PimChannel::finish() const { return last_ + spec_.timing.nCL + spec_.timing.nBL; }

}  // namespace aqpim
