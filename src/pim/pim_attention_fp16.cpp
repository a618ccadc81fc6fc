// FP16 attention in PIM, AttAcc-style (include/aqpim/pim_attention.h, docs/pimsim.md).
#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/pim_attention.h"
#include "pim_datapath.h"
#include "pim_stream.h"

namespace aqpim {

using namespace pim_detail;

namespace {

/// One head's data-path command counts and stream lengths.
struct Fp16Plan {
    std::int64_t cols_per_bank;   ///< K (and V) columns every bank serves
    std::int64_t rows_per_stream;
    std::int64_t wrgb, score_mvsb, mvgb, out_mvsb;
    std::int64_t softmax_cycles;
    int gap;
};

Fp16Plan plan(const DramSpec& s, PimPlacement p, const PimAttentionShape& sh) {
    const DramOrg& o = s.org;
    const std::int64_t elems = sh.context * sh.head_dim;  // K (or V) elements of one head
    Fp16Plan f{};
    f.cols_per_bank = ceil_div(elems * 2, std::int64_t(o.banks_per_channel()) * o.column_bytes);
    f.rows_per_stream = stream_rows(s, f.cols_per_bank);
    const std::int64_t col_elems = o.column_bytes / 2;
    const bool in_dram = p != PimPlacement::buffer_die;
    // Queries to the GEMV buffers, scores out, probabilities in, partial outputs out (one
    // partial per token partition: pseudo channel x rank x group; banks reduce in their group).
    f.wrgb = in_dram ? ceil_div(std::int64_t(sh.group) * sh.head_dim * 2, o.column_bytes) : 0;
    f.score_mvsb = in_dram ? ceil_div(std::int64_t(sh.group) * sh.context * 2, o.column_bytes) : 0;
    f.mvgb = f.score_mvsb;
    f.out_mvsb = in_dram ? ceil_div(std::int64_t(sh.group) * sh.head_dim * 2, o.column_bytes) *
                               std::int64_t(o.pseudo_channels) * o.ranks * o.bank_groups
                         : 0;
    f.softmax_cycles =
        std::int64_t(std::ceil(double(sh.group) * double(sh.context) / s.pim.softmax_elements_per_cycle));
    // A unit does col_elems MACs per query head per column, `lanes` per command slot.
    f.gap = in_dram ? unit_gap(std::int64_t(sh.group) * col_elems, s.pim.lanes, 1) * column_gap(s, p) : 0;
    if (f.gap <= column_gap(s, p)) f.gap = 0;
    return f;
}

}  // namespace

PimResult simulate_fp16_attention(const DramSpec& spec, PimPlacement placement, const PimAttentionShape& shape,
                                  PimChannel::Options opt) {
    PimResult r;
    r.workload = "fp16";
    r.placement = placement;
    r.heads_per_channel = heads_on_busiest_channel(spec, shape);
    const Fp16Plan f = plan(spec, placement, shape);
    AQPIM_CHECK(2 * f.rows_per_stream * r.heads_per_channel <= spec.org.rows,
                "{} KV heads of {} tokens per channel need {} rows per bank; {} has {}: the f16 KV cache does not fit",
                r.heads_per_channel, shape.context, 2 * f.rows_per_stream * r.heads_per_channel, spec.name,
                spec.org.rows);
    PimChannel ch(spec, opt);
    const std::int64_t H = r.heads_per_channel;
    auto k_row = [&](std::int64_t h) { return 2 * h * f.rows_per_stream; };
    auto v_row = [&](std::int64_t h) { return (2 * h + 1) * f.rows_per_stream; };
    auto stream = [&](std::int64_t first_row, std::int64_t mvsb_total, const char* phase, std::int64_t not_before) {
        StreamRequest rq;
        rq.first_row = first_row;
        rq.not_before = not_before;
        rq.cols_per_bank = f.cols_per_bank;
        rq.gap = f.gap;
        stream_with_moves(ch, placement, rq, f.rows_per_stream, mvsb_total, phase);
    };
    auto score = [&](std::int64_t h) {
        ch.set_phase("data movement");
        issue_datapath(ch, PimCmd::WRGB, f.wrgb);
        stream(k_row(h), f.score_mvsb, "score", 0);
    };
    score(0);
    for (std::int64_t h = 0; h < H; ++h) {
        ch.set_phase("softmax");
        const std::int64_t t_sfm = ch.issue(PimCmd::SFM, PimAddr{});
        if (h + 1 < H) score(h + 1);  // AttAcc's pipelining: next head's scores during this softmax
        ch.set_phase("softmax");
        const std::int64_t ready = t_sfm + f.softmax_cycles;
        ch.idle_until(ready);  // probabilities are needed before the values are streamed
        ch.set_phase("data movement");
        issue_datapath(ch, PimCmd::MVGB, f.mvgb);
        stream(v_row(h), f.out_mvsb, "context", 0);
    }
    const double elems = double(shape.kv_heads) * double(shape.context) * shape.head_dim;
    const double macs = 2.0 * elems * shape.group;
    const double io = double(shape.kv_heads) * shape.group * shape.head_dim * 2.0 * 2.0;
    r.kv_bytes = 2.0 * elems * 2.0;
    finish_result(r, ch, shape, 2.0 * elems * 2.0, macs, spec.energy.pim_mac, io);
    return r;
}

}  // namespace aqpim
