// PQ attention in PIM (include/aqpim/pim_attention.h, docs/pimsim.md "PQ attention").
#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/pim_attention.h"
#include "pim_datapath.h"
#include "pim_stream.h"

namespace aqpim {

using namespace pim_detail;

namespace {

struct PqPlan {
    std::int64_t coded = 0;                 ///< coded tokens per KV head
    std::int64_t k_cols = 0, v_cols = 0;    ///< code columns per bank (keys, values)
    std::int64_t f16_cols = 0;              ///< f16 K (and V) columns per bank for the f16 tokens
    std::int64_t cb_cols = 0;               ///< value-codebook columns per bank, per version
    std::int64_t rows_per_head = 0;
    std::int64_t lut_wrgb = 0;              ///< per version: the group's tables, broadcast
    std::int64_t score_mvsb = 0, mvgb = 0, out_mvsb = 0;
    std::int64_t softmax_cycles = 0;
    std::int64_t encode_cols = 0;           ///< codebook columns the encoder reads (K and V)
    int k_gap = 0, v_gap = 0, cb_gap = 0, f16_gap = 0;
    double lut_bytes = 0;                   ///< one unit's lookup tables
};

PqPlan plan(const DramSpec& s, PimPlacement p, const PimAttentionShape& sh, const PimPqParams& q) {
    const DramOrg& o = s.org;
    const std::int64_t banks = o.banks_per_channel();
    const std::int64_t ksub = std::int64_t(1) << q.nbits;
    const std::int64_t D = sh.head_dim;
    const std::int64_t G = sh.group;
    // Subspace mapping: the banks of a group hold disjoint subspaces of the same tokens.
    const std::int64_t split =
        q.mapping == PimPqParams::Mapping::subspace && p == PimPlacement::bank ? o.banks_per_group : 1;
    AQPIM_CHECK(q.k_m % split == 0 && q.v_m % split == 0,
                "subspace mapping splits k_m={} and v_m={} over {} banks of a group: they must divide", q.k_m, q.v_m,
                split);
    PqPlan f;
    f.coded = std::max<std::int64_t>(0, sh.context - q.f16_tokens);
    const std::int64_t f16 = sh.context - f.coded;
    const std::int64_t bank_bytes = banks * o.column_bytes;
    // Whole tokens per bank ("token" mapping): a column holds codes of column_bytes / code_bytes tokens.
    f.k_cols = ceil_div(f.coded * q.k_m * q.nbits, 8 * bank_bytes);
    f.v_cols = ceil_div(f.coded * q.v_m * q.nbits, 8 * bank_bytes);
    f.f16_cols = ceil_div(f16 * D * 2, bank_bytes);
    // out = sum_c hist[m][c] C_m[c]: every unit reads the value codebook (ksub x D f16) of each version.
    f.cb_cols = p == PimPlacement::buffer_die ? 0 : ceil_div(ksub * D * 2 / split, o.column_bytes);
    const std::int64_t rows = [&] {
        std::int64_t r = 0;
        for (std::int64_t c : {f.k_cols, f.v_cols, f.f16_cols, f.f16_cols, f.cb_cols * q.versions}) r += stream_rows(s, c);
        return r;
    }();
    f.rows_per_head = rows;
    const bool in_dram = p != PimPlacement::buffer_die;
    f.lut_bytes = double(G * q.k_m * ksub * 2 / split);
    f.lut_wrgb = in_dram ? ceil_div(G * q.k_m * ksub * 2, o.column_bytes) : 0;
    f.score_mvsb = in_dram ? ceil_div(G * sh.context * 2, o.column_bytes) : 0;
    f.mvgb = f.score_mvsb;
    // Partial outputs (group x D) of every bank group (banks reduce in their group's adder tree).
    f.out_mvsb = in_dram ? ceil_div(G * D * 2, o.column_bytes) * std::int64_t(o.pseudo_channels) * o.ranks * o.bank_groups
                         : 0;
    f.softmax_cycles = std::int64_t(std::ceil(double(G * sh.context) / s.pim.softmax_elements_per_cycle));
    f.encode_cols = q.encode_in_pim ? ceil_div(2 * ksub * D * 2, o.column_bytes) : 0;
    if (in_dram) {
        // Codes per column, each looked up (or histogrammed) once per query head of the group.
        const std::int64_t codes = std::int64_t(o.column_bytes) * 8 / q.nbits;
        const int cg = column_gap(s, p);
        f.k_gap = unit_gap(codes * G, s.pim.lut_lookups_per_cycle, cg);
        f.v_gap = f.k_gap;
        f.cb_gap = unit_gap(std::int64_t(o.column_bytes / 2) * G, s.pim.lanes, 1) * cg;
        if (f.cb_gap <= cg) f.cb_gap = 0;
        f.f16_gap = f.cb_gap;
    }
    return f;
}

}  // namespace

PimPqParams::Mapping parse_pq_mapping(std::string_view s) {
    if (s == "token") return PimPqParams::Mapping::token;
    if (s == "subspace") return PimPqParams::Mapping::subspace;
    AQPIM_FAIL("unknown PQ code mapping '{}' (expected token or subspace)", s);
}

PimResult simulate_pq_attention(const DramSpec& spec, PimPlacement placement, const PimAttentionShape& shape,
                                const PimPqParams& q, PimChannel::Options opt) {
    AQPIM_CHECK(q.nbits == 4 || q.nbits == 8, "PQ nbits must be 4 or 8, got {}", q.nbits);
    AQPIM_CHECK(q.k_m > 0 && q.v_m > 0 && shape.head_dim % q.k_m == 0 && shape.head_dim % q.v_m == 0,
                "PQ subspaces k_m={} v_m={} must divide head_dim {}", q.k_m, q.v_m, shape.head_dim);
    AQPIM_CHECK(q.versions >= 1, "PQ codebook versions must be at least 1, got {}", q.versions);
    AQPIM_CHECK(q.f16_tokens >= 0, "f16 tokens must be >= 0, got {}", q.f16_tokens);
    PimResult r;
    r.workload = "pq";
    r.placement = placement;
    r.heads_per_channel = heads_on_busiest_channel(spec, shape);
    const PqPlan f = plan(spec, placement, shape, q);
    AQPIM_CHECK(f.rows_per_head * r.heads_per_channel <= spec.org.rows,
                "{} KV heads per channel need {} rows per bank; {} has {}: the PQ KV cache does not fit",
                r.heads_per_channel, f.rows_per_head * r.heads_per_channel, spec.name, spec.org.rows);
    PimChannel ch(spec, opt);
    const std::int64_t H = r.heads_per_channel;
    auto stream = [&](std::int64_t& row, std::int64_t cols, int gap, std::int64_t mvsb_total, const char* phase) {
        StreamRequest rq;
        rq.first_row = row;
        rq.cols_per_bank = cols;
        rq.gap = gap;
        const std::int64_t n_rows = stream_rows(spec, cols);
        stream_with_moves(ch, placement, rq, n_rows, mvsb_total, phase);
        row += n_rows;
    };
    std::vector<std::int64_t> v_row(static_cast<std::size_t>(H));
    std::vector<std::int64_t> sfm_done(static_cast<std::size_t>(H));
    std::int64_t next_row = 0;
    auto score = [&](std::int64_t h) {
        std::int64_t row = next_row;
        if (f.encode_cols > 0) {
            // Encode the new token: its home bank's unit reads the K and V codebooks and finds the
            // nearest codeword per subspace; then the codes are written (one column, K and V).
            ch.set_phase("encode");
            PimAddr a;
            a.bank = int(h % spec.org.banks_per_group);
            a.row = row;
            ch.issue(PimCmd::ACT, a);
            for (std::int64_t c = 0; c < f.encode_cols; ++c) {
                a.col = int(c % spec.org.columns);
                ch.issue(PimCmd::RD, a);
            }
            ch.issue(PimCmd::WR, a);
            ch.issue(PimCmd::PRE, a);
        }
        for (int v = 0; v < q.versions; ++v) {
            ch.set_phase("data movement");
            issue_datapath(ch, PimCmd::WRGB, f.lut_wrgb);  // this version's tables into every unit buffer
            std::int64_t cols = f.k_cols / q.versions + (v < f.k_cols % q.versions ? 1 : 0);
            stream(row, cols, f.k_gap, v + 1 == q.versions ? f.score_mvsb : 0, "score");
        }
        stream(row, f.f16_cols, f.f16_gap, 0, "score");  // f16 sinks and window, AttAcc-style
        v_row[std::size_t(h)] = row;
        next_row = row + stream_rows(spec, f.v_cols) + stream_rows(spec, f.f16_cols) +
                   q.versions * stream_rows(spec, f.cb_cols);
        ch.set_phase("softmax");
        sfm_done[std::size_t(h)] = ch.issue(PimCmd::SFM, PimAddr{}) + f.softmax_cycles;
    };
    score(0);
    for (std::int64_t h = 0; h < H; ++h) {
        if (h + 1 < H) score(h + 1);
        ch.set_phase("softmax");
        ch.idle_until(sfm_done[std::size_t(h)]);
        ch.set_phase("data movement");
        issue_datapath(ch, PimCmd::MVGB, f.mvgb);
        std::int64_t row = v_row[std::size_t(h)];
        stream(row, f.v_cols, f.v_gap, 0, "context");     // histograms of the value codes
        stream(row, f.f16_cols, f.f16_gap, 0, "context"); // f16 values
        for (int v = 0; v < q.versions; ++v)              // histogram x codebook, per version
            stream(row, f.cb_cols, f.cb_gap, v + 1 == q.versions ? f.out_mvsb : 0, "context");
    }
    const std::int64_t ksub = std::int64_t(1) << q.nbits;
    const double heads = double(shape.kv_heads), G = shape.group, D = shape.head_dim;
    const double f16 = double(shape.context - f.coded);
    const double code_bytes = double(f.coded) * (q.k_m + q.v_m) * q.nbits / 8.0;
    r.kv_bytes = heads * (code_bytes + f16 * D * 2 * 2);
    // Array bytes into the units: codes and f16 rows, every unit of the head's channel reading the
    // value codebook once per version, the encoder reading the K and V codebooks.
    const double cb_read = placement == PimPlacement::buffer_die
                               ? 0.0
                               : double(units_per_channel(spec, placement)) * double(f.cb_cols) *
                                     spec.org.column_bytes * q.versions;
    const double enc_read = q.encode_in_pim ? 2.0 * double(ksub) * D * 2 : 0.0;
    const double bytes_read = r.kv_bytes + heads * (cb_read + enc_read);
    // Operations: table lookups + adds (keys and value histograms), f16 MACs for the f16 tokens,
    // the tables' and the histogram x codebook products, encoding.
    const double lookups = heads * G * double(f.coded) * (q.k_m + q.v_m);
    const double macs = heads * (G * f16 * D * 2 + G * ksub * D * 2 * q.versions + (q.encode_in_pim ? 2.0 * ksub * D : 0.0));
    const double io = heads * G * D * 2.0 * 2.0;
    finish_result(r, ch, shape, bytes_read, lookups, spec.energy.lut_access, io);
    r.energy.compute += macs * spec.energy.pim_mac;
    r.lut_buffer_bytes = f.lut_bytes;
    r.lut_sram_mm2 = f.lut_bytes * spec.pim.sram_um2_per_byte * units_per_channel(spec, placement) *
                     spec.org.channels * 1e-6;
    return r;
}

}  // namespace aqpim
