// Row and column command order of a stream (src/pim/pim_stream.h).
#include "pim_stream.h"

#include <algorithm>
#include <vector>

#include "aqpim/error.h"
#include "pim_datapath.h"
#include "core/int_math.h"

namespace aqpim::pim_detail {

std::int64_t stream_rows(const DramSpec& spec, std::int64_t cols_per_bank) {
    return ceil_div(cols_per_bank, spec.org.columns);
}

namespace {

struct Cursor {
    PimChannel& ch;
    int gap;
    std::int64_t prev = -1;
    std::int64_t not_before;
    std::int64_t access(PimCmd c, const PimAddr& a) {
        std::int64_t nb = not_before;
        if (prev >= 0 && gap > 0) nb = std::max(nb, prev + gap);
        prev = ch.issue(c, a, nb);
        return prev;
    }
};

std::int64_t cols_in_row(const DramSpec& s, std::int64_t total, std::int64_t i) {
    return std::min<std::int64_t>(s.org.columns, total - i * s.org.columns);
}

std::int64_t stream_all_bank(PimChannel& ch, const StreamRequest& rq) {
    const DramSpec& s = ch.spec();
    const std::int64_t n_rows = stream_rows(s, rq.cols_per_bank);
    Cursor cur{ch, rq.gap, -1, rq.not_before};
    for (std::int64_t i = 0; i < n_rows; ++i) {
        PimAddr a;
        a.row = rq.first_row + i;
        ch.issue(PimCmd::ACTAB, a, rq.not_before);
        if (i > 0 && rq.after_row) rq.after_row(i);
        const std::int64_t n = cols_in_row(s, rq.cols_per_bank, i);
        for (std::int64_t c = 0; c < n; ++c) {
            a.col = int(c);
            cur.access(PimCmd::MACAB, a);
        }
        ch.issue(PimCmd::PREA, PimAddr{});
    }
    if (rq.after_row) rq.after_row(n_rows);
    return cur.prev;
}

/// Segments (row, bank set) visited in order; open(k)/close(k)/access(k, col) issue segment k's
/// commands. The next segment opens and the previous closes right after a segment's first access.
template <class Open, class Close, class Access>
std::int64_t stream_segments(std::int64_t n_seg, std::int64_t seg_cols_total, std::int64_t segs_per_row,
                             const DramSpec& s, const StreamRequest& rq, Open open, Close close, Access access) {
    std::int64_t last = rq.not_before;
    if (n_seg == 0) return last;
    open(0);
    for (std::int64_t k = 0; k < n_seg; ++k) {
        const std::int64_t row_i = k / segs_per_row;
        const std::int64_t n = cols_in_row(s, seg_cols_total, row_i);
        for (std::int64_t c = 0; c < n; ++c) {
            last = access(k, int(c));
            if (c == 0) {
                if (k > 0) close(k - 1);
                if (k + 1 < n_seg) open(k + 1);
            }
        }
        if (n == 0) {
            if (k > 0) close(k - 1);
            if (k + 1 < n_seg) open(k + 1);
        }
        if ((k + 1) % segs_per_row == 0 && rq.after_row) rq.after_row((k + 1) / segs_per_row);
    }
    close(n_seg - 1);
    return last;
}

std::int64_t stream_same_bank(PimChannel& ch, const StreamRequest& rq) {
    const DramSpec& s = ch.spec();
    const int nb = s.org.banks_per_group;
    const std::int64_t n_seg = stream_rows(s, rq.cols_per_bank) * nb;
    Cursor cur{ch, rq.gap, -1, rq.not_before};
    auto addr = [&](std::int64_t k) {
        PimAddr a;
        a.bank = int(k % nb);
        a.row = rq.first_row + k / nb;
        return a;
    };
    return stream_segments(
        n_seg, rq.cols_per_bank, nb, s, rq, [&](std::int64_t k) { ch.issue(PimCmd::ACTSB, addr(k), rq.not_before); },
        [&](std::int64_t k) { ch.issue(PimCmd::PRESB, addr(k)); },
        [&](std::int64_t k, int c) {
            PimAddr a = addr(k);
            a.col = c;
            return cur.access(PimCmd::MACSB, a);
        });
}

std::int64_t stream_buffer(PimChannel& ch, const StreamRequest& rq) {
    const DramSpec& s = ch.spec();
    const DramOrg& o = s.org;
    const std::int64_t per_row = std::int64_t(o.ranks) * o.banks_per_group;
    const std::int64_t n_seg = stream_rows(s, rq.cols_per_bank) * per_row;
    Cursor cur{ch, rq.gap, -1, rq.not_before};
    // Segment k: rank, bank and row; its banks are that (rank, bank) in every pseudo channel and group.
    auto each_bank = [&](std::int64_t k, auto&& f) {
        PimAddr a;
        a.bank = int(k % o.banks_per_group);
        a.rank = int((k / o.banks_per_group) % o.ranks);
        a.row = rq.first_row + k / per_row;
        for (int g = 0; g < o.bank_groups; ++g)
            for (int p = 0; p < o.pseudo_channels; ++p) {
                a.bg = g;
                a.pch = p;
                f(a);
            }
    };
    return stream_segments(
        n_seg, rq.cols_per_bank, per_row, s, rq,
        [&](std::int64_t k) { each_bank(k, [&](const PimAddr& a) { ch.issue(PimCmd::ACT, a, rq.not_before); }); },
        [&](std::int64_t k) { each_bank(k, [&](const PimAddr& a) { ch.issue(PimCmd::PRE, a); }); },
        [&](std::int64_t k, int c) {
            std::int64_t t = 0;
            each_bank(k, [&](PimAddr a) {
                a.col = c;
                t = cur.access(PimCmd::RD, a);
            });
            return t;
        });
}

}  // namespace

std::int64_t stream_columns(PimChannel& ch, PimPlacement placement, const StreamRequest& rq) {
    AQPIM_CHECK(rq.cols_per_bank >= 0, "negative stream length {}", rq.cols_per_bank);
    const std::int64_t rows = stream_rows(ch.spec(), rq.cols_per_bank);
    AQPIM_CHECK(rq.first_row + rows <= ch.spec().org.rows,
                "the workload needs rows up to {} in every bank but a bank has {} rows (it does not fit in {})",
                rq.first_row + rows, ch.spec().org.rows, ch.spec().name);
    if (rq.cols_per_bank == 0) return rq.not_before;
    switch (placement) {
        case PimPlacement::bank: return stream_all_bank(ch, rq);
        case PimPlacement::bank_group: return stream_same_bank(ch, rq);
        case PimPlacement::buffer_die: return stream_buffer(ch, rq);
    }
    return 0;
}

void stream_with_moves(PimChannel& ch, PimPlacement placement, StreamRequest req, std::int64_t n_rows,
                       std::int64_t moves, const char* phase) {
    std::int64_t done = 0;
    req.after_row = [&](std::int64_t rows_done) {
        const std::int64_t due = n_rows > 0 ? moves * rows_done / n_rows : 0;
        if (due > done) {
            ch.set_phase("data movement");
            issue_datapath(ch, PimCmd::MVSB, due - done);
            ch.set_phase(phase);
        }
        done = std::max(done, due);
    };
    ch.set_phase(phase);
    stream_columns(ch, placement, req);
    if (done < moves) {
        ch.set_phase("data movement");
        issue_datapath(ch, PimCmd::MVSB, moves - done);
    }
}

}  // namespace aqpim::pim_detail
