// The command engine: one test per timing constraint (blocked at t-1, allowed at t), bank states,
// refresh, trace format, and closed-form checks of row cycle time and unloaded latency.
#include <gtest/gtest.h>

#include <sstream>

#include "aqpim/error.h"
#include "aqpim/pim_engine.h"
#include "pim_test_util.h"

namespace aqpim {
namespace {

using C = PimCmd;

PimChannel::Options no_refresh() {
    PimChannel::Options o;
    o.refresh = false;
    return o;
}

PimAddr bank(int pch, int rank, int bg, int b, std::int64_t row = 7) {
    PimAddr a;
    a.pch = pch; a.rank = rank; a.bg = bg; a.bank = b; a.row = row;
    return a;
}

/// `c` at `a` is blocked at t-1 (ready false, issue_at throws) and allowed at t; then issue it at t.
void expect_first_legal(PimChannel& ch, C c, const PimAddr& a, std::int64_t t) {
    EXPECT_EQ(ch.earliest(c, a), t) << cmd_name(c);
    EXPECT_FALSE(ch.ready(c, a, t - 1)) << cmd_name(c);
    EXPECT_THROW(ch.issue_at(c, a, t - 1), Error) << cmd_name(c);
    EXPECT_TRUE(ch.ready(c, a, t)) << cmd_name(c);
    ch.issue_at(c, a, t);
}

class PimEngine : public ::testing::Test {
protected:
    DramSpec s = test::distinct_timing_spec();
    const DramTiming& t = s.timing;
    PimChannel ch{s, no_refresh()};
};

TEST_F(PimEngine, ActToReadIsRcd) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::RD, bank(0, 0, 0, 0), t.nRCD);
}

TEST_F(PimEngine, ActToWriteIsRcd) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::WR, bank(0, 0, 0, 0), t.nRCD);
}

TEST_F(PimEngine, ActToPreIsRas) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::PRE, bank(0, 0, 0, 0), t.nRAS);
}

TEST_F(PimEngine, ActToActSameBankIsRc) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::PRE, bank(0, 0, 0, 0), t.nRAS);  // nRAS + nRP = 62 < nRC = 66
    expect_first_legal(ch, C::ACT, bank(0, 0, 0, 0), t.nRC);
}

TEST_F(PimEngine, PreToActIsRp) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::PRE, bank(0, 0, 0, 0), 55);  // 55 + 17 = 72 > nRC
    expect_first_legal(ch, C::ACT, bank(0, 0, 0, 0), 55 + t.nRP);
}

TEST_F(PimEngine, ReadToPreIsRtpL) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::RD, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::PRE, bank(0, 0, 0, 0), 40 + t.nRTP_L);
}

TEST_F(PimEngine, WriteToPreIsWriteRecovery) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::WR, bank(0, 0, 0, 0), 30);
    expect_first_legal(ch, C::PRE, bank(0, 0, 0, 0), 30 + t.nCWL + t.nBL + t.nWR);
}

TEST_F(PimEngine, ReadToReadSameGroupIsCcdL) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::ACT, bank(0, 0, 0, 1), 20);
    ch.issue_at(C::RD, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::RD, bank(0, 0, 0, 1), 40 + t.nCCD_L);
}

TEST_F(PimEngine, ReadToReadOtherGroupIsCcdS) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::ACT, bank(0, 0, 1, 0), 20);
    ch.issue_at(C::RD, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::RD, bank(0, 0, 1, 0), 40 + t.nCCD_S);
}

TEST_F(PimEngine, ReadToReadOtherRankIsBurst) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::ACT, bank(0, 1, 0, 0), 20);
    ch.issue_at(C::RD, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::RD, bank(0, 1, 0, 0), 40 + t.nBL);
}

TEST_F(PimEngine, PseudoChannelsHaveTheirOwnBus) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::ACT, bank(1, 0, 0, 0), 20);
    ch.issue_at(C::RD, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::RD, bank(1, 0, 0, 0), 41);  // only the one-command column bus
}

TEST_F(PimEngine, ReadToWriteTurnaround) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::ACT, bank(0, 0, 1, 0), 20);
    ch.issue_at(C::RD, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::WR, bank(0, 0, 1, 0), 40 + t.nCL + t.nBL + 2 - t.nCWL);
}

TEST_F(PimEngine, WriteToReadOtherGroupIsWtrS) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::ACT, bank(0, 0, 1, 0), 20);
    ch.issue_at(C::WR, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::RD, bank(0, 0, 1, 0), 40 + t.nCWL + t.nBL + t.nWTR_S);
}

TEST_F(PimEngine, WriteToReadSameGroupIsWtrL) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::ACT, bank(0, 0, 0, 1), 20);
    ch.issue_at(C::WR, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::RD, bank(0, 0, 0, 1), 40 + t.nCWL + t.nBL + t.nWTR_L);
}

TEST_F(PimEngine, ActToActOtherGroupIsRrdS) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::ACT, bank(0, 0, 1, 0), t.nRRD_S);
}

TEST_F(PimEngine, ActToActSameGroupIsRrdL) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::ACT, bank(0, 0, 0, 1), t.nRRD_L);
}

TEST_F(PimEngine, FifthActWaitsForFaw) {
    for (int i = 0; i < 4; ++i) ch.issue_at(C::ACT, bank(0, 0, i, 0), i * t.nRRD_S);
    expect_first_legal(ch, C::ACT, bank(0, 0, 0, 1), t.nFAW);  // 4 ACTs from cycle 0
    // Another rank has its own window.
    EXPECT_EQ(ch.earliest(C::ACT, bank(0, 1, 0, 0)), t.nFAW + 2);  // only the ACT's 2-cycle row bus
}

TEST_F(PimEngine, AllBankMacGapIsCcdAb) {
    ch.issue_at(C::ACTAB, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::MACAB, bank(0, 0, 0, 0), t.nRCD);
    expect_first_legal(ch, C::MACAB, bank(0, 0, 0, 0), t.nRCD + t.nCCD_AB);
}

TEST_F(PimEngine, PowerCapWidensAllBankMacGap) {
    s.power_cap = true;
    PimChannel capped(s, no_refresh());
    capped.issue_at(C::ACTAB, bank(0, 0, 0, 0), 0);
    capped.issue_at(C::MACAB, bank(0, 0, 0, 0), t.nRCD);
    expect_first_legal(capped, C::MACAB, bank(0, 0, 0, 0), t.nRCD + t.nCCD_AB_cap);
}

TEST_F(PimEngine, AllBankRowCycle) {
    ch.issue_at(C::ACTAB, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::MACAB, bank(0, 0, 0, 0), 40);
    expect_first_legal(ch, C::PREA, PimAddr{}, 40 + t.nRTP_L);  // > nRAS
    expect_first_legal(ch, C::ACTAB, PimAddr{}, std::max<std::int64_t>(t.nRC, 48 + t.nRP));
}

TEST_F(PimEngine, AllBankActToPrechargeIsRas) {
    ch.issue_at(C::ACTAB, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::PREA, PimAddr{}, t.nRAS);
}

TEST_F(PimEngine, SameBankMacs) {
    ch.issue_at(C::ACTSB, bank(0, 0, 0, 2), 0);
    expect_first_legal(ch, C::MACSB, bank(0, 0, 0, 2), t.nRCD);
    expect_first_legal(ch, C::MACSB, bank(0, 0, 0, 2), t.nRCD + t.nCCD_SB);
    expect_first_legal(ch, C::PRESB, bank(0, 0, 0, 2), t.nRAS);
    expect_first_legal(ch, C::ACTSB, bank(0, 0, 0, 2), std::max<std::int64_t>(t.nRC, t.nRAS + t.nRP));
    // Another bank index opens right away (2-cycle row bus only).
    EXPECT_EQ(ch.earliest(C::ACTSB, bank(0, 0, 0, 3)), ch.last_issue() + 2);
}

TEST_F(PimEngine, RefreshNeedsClosedBanksAndBlocksForRfc) {
    ch.issue_at(C::ACTAB, PimAddr{}, 0);
    EXPECT_THROW(ch.earliest(C::REFab, PimAddr{}), Error);
    ch.issue_at(C::PREA, PimAddr{}, 55);
    expect_first_legal(ch, C::REFab, PimAddr{}, 55 + t.nRP);  // 72 > nRC after the ACTAB
    expect_first_legal(ch, C::ACTAB, PimAddr{}, 55 + t.nRP + t.nRFC);
}

TEST_F(PimEngine, ActToRefreshIsRc) {
    ch.issue_at(C::ACTAB, PimAddr{}, 0);
    ch.issue_at(C::PREA, PimAddr{}, t.nRAS);
    expect_first_legal(ch, C::REFab, PimAddr{}, t.nRC);
}

TEST_F(PimEngine, DataPathMovesShareThePseudoChannelBus) {
    ch.issue_at(C::WRGB, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::MVSB, bank(0, 0, 0, 1), t.nCCD_L);
    expect_first_legal(ch, C::MVGB, bank(0, 0, 1, 0), t.nCCD_L + t.nCCD_S);
    expect_first_legal(ch, C::SFM, bank(0, 1, 0, 0), t.nCCD_L + t.nCCD_S + t.nBL);
}

TEST_F(PimEngine, BankStatesAreEnforced) {
    EXPECT_THROW(ch.earliest(C::RD, bank(0, 0, 0, 0)), Error);   // closed
    ch.issue_at(C::ACT, bank(0, 0, 0, 0, 3), 0);
    EXPECT_THROW(ch.earliest(C::RD, bank(0, 0, 0, 0, 4)), Error);  // other row open
    EXPECT_THROW(ch.earliest(C::ACT, bank(0, 0, 0, 0, 4)), Error); // open: precharge first
    EXPECT_THROW(ch.earliest(C::MACAB, bank(0, 0, 0, 0, 3)), Error);  // not every bank open
    EXPECT_THROW(ch.earliest(C::ACTAB, PimAddr{}), Error);
    EXPECT_THROW(ch.earliest(C::RD, bank(0, 0, 9, 0)), Error);   // no bank group 9
    EXPECT_THROW(ch.earliest(C::ACT, bank(0, 0, 0, 0, s.org.rows)), Error);
    EXPECT_EQ(ch.open_row(bank(0, 0, 0, 0)), 3);
}

TEST_F(PimEngine, ReadToPrechargeAllIsRtpS) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::RD, bank(0, 0, 0, 0), 44);  // 44 + nRTP_S = 50 > nRAS
    expect_first_legal(ch, C::PREA, PimAddr{}, 44 + t.nRTP_S);
}

TEST_F(PimEngine, WriteToPrechargeAllIsWriteRecovery) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::WR, bank(0, 0, 0, 0), 30);
    expect_first_legal(ch, C::PREA, PimAddr{}, 30 + t.nCWL + t.nBL + t.nWR);
}

TEST_F(PimEngine, PrechargeAllToActIsRp) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    ch.issue_at(C::PREA, PimAddr{}, 60);
    expect_first_legal(ch, C::ACT, bank(0, 0, 0, 0), 60 + t.nRP);
}

TEST_F(PimEngine, SameBankMacToPrechargeIsRtpL) {
    ch.issue_at(C::ACTSB, bank(0, 0, 0, 1), 0);
    ch.issue_at(C::MACSB, bank(0, 0, 0, 1), 40);
    expect_first_legal(ch, C::PRESB, bank(0, 0, 0, 1), 40 + t.nRTP_L);
}

TEST_F(PimEngine, SameBankMacToPrechargeAllIsRtpL) {
    ch.issue_at(C::ACTSB, bank(0, 0, 0, 1), 0);
    ch.issue_at(C::MACSB, bank(0, 0, 0, 1), 40);
    expect_first_legal(ch, C::PREA, PimAddr{}, 40 + t.nRTP_L);
}

TEST_F(PimEngine, CommandBuses) {
    ch.issue_at(C::ACT, bank(0, 0, 0, 0), 0);
    expect_first_legal(ch, C::ACT, bank(1, 0, 0, 0), 2);  // another pseudo channel: only the 2-cycle ACT
    ch.issue_at(C::PRE, bank(0, 0, 0, 0), 50);
    expect_first_legal(ch, C::PRE, bank(1, 0, 0, 0), 51);  // one row command per cycle
    expect_first_legal(ch, C::WRGB, bank(0, 0, 0, 0), 51);  // the column bus is separate
    expect_first_legal(ch, C::MVSB, bank(1, 0, 0, 0), 52);  // one column command per cycle
}

TEST_F(PimEngine, CommandNamesRoundTrip) {
    for (int i = 0; i < kPimCmdCount; ++i) EXPECT_EQ(parse_cmd(cmd_name(PimCmd(i))), PimCmd(i));
    EXPECT_THROW(parse_cmd("NOP"), Error);
}

// ---- refresh, trace, closed forms ----------------------------------------------------------------

TEST(PimEngineRefresh, OneRefreshPerInterval) {
    const DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    PimChannel ch(s);
    PimAddr a;
    for (int row = 0; row < 200; ++row) {
        a.row = row;
        ch.issue(C::ACTAB, a);
        for (int c = 0; c < s.org.columns; ++c) {
            a.col = c;
            ch.issue(C::MACAB, a);
        }
        ch.issue(C::PREA, PimAddr{});
    }
    const std::int64_t refreshes = ch.count(C::REFab);
    EXPECT_EQ(refreshes, ch.last_issue() / s.timing.nREFI);
    // Rows open at a refresh are reopened: one extra ACTAB per refresh at most.
    EXPECT_LE(ch.count(C::ACTAB), 200 + refreshes);
    EXPECT_GE(ch.count(C::ACTAB), 200);
}

TEST(PimEngineTrace, OneLinePerCommand) {
    const DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    std::ostringstream out;
    PimChannel::Options o;
    o.refresh = false;
    o.trace = &out;
    PimChannel ch(s, o);
    PimAddr a;
    a.bg = 2; a.bank = 1; a.row = 5;
    ch.issue(C::ACT, a);
    a.col = 3;
    ch.issue(C::RD, a);
    EXPECT_EQ(out.str(), fmt::format("0 ACT 0 0 2 1 5 0\n{} RD 0 0 2 1 5 3\n", s.timing.nRCD));
}

TEST(PimEngineClosedForm, AllBankRowTimeAndBandwidth) {
    // One row of all-bank MACs takes nRCD + (columns - 1) nCCD_AB + nRTP_L + nRP from ACTAB to the
    // next ACTAB (when that exceeds nRC and nRAS holds).
    for (bool cap : {false, true}) {
        DramSpec s = DramSpec::load("hbm3-5.2-attacc");
        s.power_cap = cap;
        PimChannel::Options o;
        o.refresh = false;
        PimChannel ch(s, o);
        PimAddr a;
        const int rows = 10;
        std::int64_t t_act = 0;
        for (int r = 0; r < rows; ++r) {
            a.row = r;
            t_act = ch.issue(C::ACTAB, a);
            for (int c = 0; c < s.org.columns; ++c) ch.issue(C::MACAB, a);
            ch.issue(C::PREA, PimAddr{});
        }
        const std::int64_t per_row = s.timing.nRCD + std::int64_t(s.org.columns - 1) * s.nCCD_AB() +
                                     s.timing.nRTP_L + s.timing.nRP;
        EXPECT_EQ(t_act, (rows - 1) * per_row) << "cap " << cap;
        // Peak internal bandwidth: every bank a column per nCCD_AB.
        const double peak = double(s.org.banks_per_channel()) * s.org.column_bytes / (s.nCCD_AB() * s.timing.tCK);
        EXPECT_DOUBLE_EQ(s.peak_internal_bandwidth(PimPlacement::bank), peak * s.org.channels);
        const double achieved = double(s.org.banks_per_channel()) * s.org.row_bytes() / (per_row * s.timing.tCK);
        EXPECT_LT(achieved, peak);
        EXPECT_GT(achieved, 0.5 * peak);
    }
}

TEST(PimEngineClosedForm, UnloadedReadLatencyAndPinBandwidth) {
    const DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    PimChannel::Options o;
    o.refresh = false;
    PimChannel ch(s, o);
    PimAddr a;
    ch.issue(C::ACT, a);
    ch.issue(C::RD, a);
    EXPECT_NEAR(double(ch.finish()) * s.timing.tCK, s.unloaded_read_latency(), 1e-15);
    EXPECT_NEAR(s.unloaded_read_latency(), (19 + 19 + 2) * 0.76923e-9, 1e-12);
    // HBM3 at 5.2 Gb/s x 1024 pins = 665.6 GB/s per stack.
    EXPECT_NEAR(s.peak_external_bandwidth(), 5.2e9 * 1024 / 8, 0.001 * 665.6e9);
}

}  // namespace
}  // namespace aqpim
