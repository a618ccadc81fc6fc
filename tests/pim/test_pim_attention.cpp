// Attention workloads: AttAcc validation, scaling laws the mappings must obey, PQ against FP16.
#include <gtest/gtest.h>

#include "aqpim/error.h"
#include "aqpim/pim_attention.h"
#include "aqpim/pim_validate.h"

namespace aqpim {
namespace {

PimAttentionShape attacc_shape(std::int64_t heads = 130, std::int64_t context = 2048) {
    PimAttentionShape s;
    s.kv_heads = heads;
    s.context = context;
    s.head_dim = 128;
    return s;
}

TEST(PimAttention, MatchesAttAccWithinTenPercent) {
    const auto rows = validate_attacc();
    ASSERT_EQ(rows.size(), 6u);
    for (const auto& r : rows) {
        EXPECT_LE(std::abs(r.error()), kAttAccTolerance) << r.name << ": " << r.simulated << " vs " << r.reference;
        EXPECT_GT(r.simulated, 0);
    }
    // The ordering AttAcc reports: bank < bank group < buffer die, and the cap slows MACs down.
    EXPECT_LT(rows[0].simulated, rows[1].simulated);
    EXPECT_LT(rows[1].simulated, rows[4].simulated);
    EXPECT_LT(rows[3].simulated, rows[4].simulated);
    EXPECT_LT(rows[4].simulated, rows[5].simulated);
    // Refresh costs every case 6-12% (docs/pim-validation.md's last column).
    const auto no_refresh = validate_attacc(false);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        EXPECT_LT(no_refresh[i].simulated, 0.95 * rows[i].simulated) << rows[i].name;
        EXPECT_GT(no_refresh[i].simulated, 0.85 * rows[i].simulated) << rows[i].name;
    }
}

TEST(PimAttention, BusiestChannelSetsTheTime) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    // 16 heads and 1 head per channel both put one head on the busiest channel.
    const auto one = simulate_fp16_attention(s, PimPlacement::bank, attacc_shape(16));
    const auto few = simulate_fp16_attention(s, PimPlacement::bank, attacc_shape(3));
    EXPECT_EQ(one.heads_per_channel, 1);
    EXPECT_EQ(one.cycles, few.cycles);
    // 17 heads need a second round on one channel.
    const auto more = simulate_fp16_attention(s, PimPlacement::bank, attacc_shape(17));
    EXPECT_EQ(more.heads_per_channel, 2);
    EXPECT_GT(more.cycles, 1.8 * one.cycles);
    // Two devices halve the heads per channel.
    auto two = attacc_shape(32);
    two.devices = 2;
    EXPECT_EQ(simulate_fp16_attention(s, PimPlacement::bank, two).cycles, one.cycles);
}

TEST(PimAttention, Fp16TimeScalesWithContext) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    const auto a = simulate_fp16_attention(s, PimPlacement::bank, attacc_shape(16, 4096));
    const auto b = simulate_fp16_attention(s, PimPlacement::bank, attacc_shape(16, 8192));
    EXPECT_NEAR(double(b.cycles) / double(a.cycles), 2.0, 0.1);
    // Internal bandwidth stays below the placement's peak.
    EXPECT_LT(b.internal_bandwidth / s.org.channels * s.org.channels, s.peak_internal_bandwidth(PimPlacement::bank));
    EXPECT_GT(b.internal_bandwidth, 0.3 * s.peak_internal_bandwidth(PimPlacement::bank));
}

TEST(PimAttention, GqaMakesFp16UnitsComputeBound) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    auto shape = attacc_shape(16, 8192);
    const auto g1 = simulate_fp16_attention(s, PimPlacement::bank, shape);
    shape.group = 4;  // 4 query heads per column: 64 MACs on 16 lanes
    const auto g4 = simulate_fp16_attention(s, PimPlacement::bank, shape);
    EXPECT_GT(double(g4.cycles) / double(g1.cycles), 3.0);
}

TEST(PimAttention, PqReadsFewerBytesAndIsFasterAtLongContext) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    auto shape = attacc_shape(32, 16384);
    shape.group = 4;
    PimPqParams pq;
    for (auto p : {PimPlacement::bank, PimPlacement::bank_group, PimPlacement::buffer_die}) {
        const auto f = simulate_fp16_attention(s, p, shape);
        const auto q = simulate_pq_attention(s, p, shape, pq);
        EXPECT_LT(q.kv_bytes, f.kv_bytes / 8) << placement_name(p);
        EXPECT_LT(q.seconds, f.seconds) << placement_name(p);
        EXPECT_LT(q.energy.total(), f.energy.total()) << placement_name(p);
        if (p != PimPlacement::buffer_die)
            EXPECT_GT(q.counts[int(PimCmd::WRGB)], 0) << "lookup tables are written to the unit buffers";
        EXPECT_GT(q.counts[int(PimCmd::SFM)], 0);
    }
}

TEST(PimAttention, PqLookupRateBoundsTheScan) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    auto shape = attacc_shape(16, 16384);
    shape.group = 4;
    PimPqParams pq;
    pq.versions = 1;
    const auto slow = simulate_pq_attention(s, PimPlacement::bank, shape, pq);
    s.pim.lut_lookups_per_cycle = 256;  // enough to keep up with the column reads
    const auto fast = simulate_pq_attention(s, PimPlacement::bank, shape, pq);
    EXPECT_LT(fast.cycles, slow.cycles);
    // LUT buffer: group x k_m x ksub x 2 bytes per unit.
    EXPECT_DOUBLE_EQ(slow.lut_buffer_bytes, 4.0 * 32 * 16 * 2);
}

TEST(PimAttention, MoreCodebookVersionsCostMore) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    auto shape = attacc_shape(16, 8192);
    PimPqParams pq;
    pq.versions = 1;
    const auto v1 = simulate_pq_attention(s, PimPlacement::bank, shape, pq);
    pq.versions = 8;
    const auto v8 = simulate_pq_attention(s, PimPlacement::bank, shape, pq);
    EXPECT_GT(v8.cycles, v1.cycles);
    EXPECT_EQ(v8.counts[int(PimCmd::WRGB)], 8 * v1.counts[int(PimCmd::WRGB)]);  // one table set per version
}

TEST(PimAttention, SubspaceMappingShrinksTablesAndCodebookWork) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    auto shape = attacc_shape(16, 16384);
    shape.group = 4;
    PimPqParams pq;
    pq.versions = 4;
    const auto token = simulate_pq_attention(s, PimPlacement::bank, shape, pq);
    pq.mapping = parse_pq_mapping("subspace");
    const auto sub = simulate_pq_attention(s, PimPlacement::bank, shape, pq);
    EXPECT_DOUBLE_EQ(sub.lut_buffer_bytes, token.lut_buffer_bytes / s.org.banks_per_group);
    EXPECT_LT(sub.cycles, token.cycles);
    EXPECT_LT(sub.counts[int(PimCmd::MACAB)], token.counts[int(PimCmd::MACAB)]);
    // Other placements have no per-bank units to split over: the mapping changes nothing there.
    const auto bg = simulate_pq_attention(s, PimPlacement::bank_group, shape, pq);
    pq.mapping = PimPqParams::Mapping::token;
    EXPECT_EQ(simulate_pq_attention(s, PimPlacement::bank_group, shape, pq).cycles, bg.cycles);
    pq.mapping = PimPqParams::Mapping::subspace;
    pq.k_m = 2;
    pq.v_m = 2;
    EXPECT_THROW(simulate_pq_attention(s, PimPlacement::bank, shape, pq), Error);
    EXPECT_THROW(parse_pq_mapping("diagonal"), Error);
}

TEST(PimAttention, RefusesWhatDoesNotFitOrMakesNoSense) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    EXPECT_THROW(simulate_fp16_attention(s, PimPlacement::bank, attacc_shape(16, 1 << 24)), Error);
    EXPECT_THROW(simulate_fp16_attention(s, PimPlacement::bank, attacc_shape(0)), Error);
    PimPqParams pq;
    pq.k_m = 48;  // does not divide 128
    EXPECT_THROW(simulate_pq_attention(s, PimPlacement::bank, attacc_shape(), pq), Error);
    pq.k_m = 32;
    pq.nbits = 3;
    EXPECT_THROW(simulate_pq_attention(s, PimPlacement::bank, attacc_shape(), pq), Error);
}

TEST(PimAttention, PhasesSumToTheIssueTime) {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    PimChannel::Options o;
    const auto r = simulate_pq_attention(s, PimPlacement::bank, attacc_shape(32, 4096), PimPqParams{}, o);
    std::int64_t sum = 0;
    for (const auto& [name, c] : r.phases) sum += c;
    EXPECT_EQ(sum + s.timing.nCL + s.timing.nBL, r.cycles);
}

}  // namespace
}  // namespace aqpim
