#pragma once
// Streaming a data set spread evenly over every bank of one channel through the PIM units of a
// placement: the row open/close commands and the column accesses, in the order that keeps the
// units busy (internal to src/pim).
//
//   bank       ACTAB row r, MACAB x columns, PREA; rows one after another (every bank at once)
//   bank_group MACSB through bank b of every group; the next bank's ACTSB and the previous bank's
//              PRESB are issued right after the first MACSB of a bank, hiding tRCD and tRP
//   buffer     RD from the banks (rank k, bank b) of every pseudo channel and group, alternating
//              pseudo channels and groups so each pseudo channel's bus moves a burst every nBL;
//              the next group's ACTs and the previous group's PREs issued early, as above

#include <cstdint>
#include <functional>

#include "aqpim/pim_engine.h"

namespace aqpim::pim_detail {

struct StreamRequest {
    std::int64_t first_row = 0;
    std::int64_t cols_per_bank = 0;   ///< column accesses every bank serves
    int gap = 0;                      ///< least cycles between two access commands of the stream (unit compute)
    std::int64_t not_before = 0;      ///< first command no earlier than this
    /// Called after each completed row of every bank (argument: rows done), to interleave data-path
    /// commands (AttAcc moves partial results out as they complete).
    std::function<void(std::int64_t)> after_row;
};

/// Rows per bank a stream of cols_per_bank columns occupies.
std::int64_t stream_rows(const DramSpec& spec, std::int64_t cols_per_bank);

/// Issue the stream on `ch`; returns the cycle of its last access command.
std::int64_t stream_columns(PimChannel& ch, PimPlacement placement, const StreamRequest& req);

/// stream_columns under `phase` with `moves` MVSB commands ("data movement") interleaved in
/// proportion to the rows done out of n_rows (partial results leave as they complete, AttAcc-style);
/// moves still due when the stream ends are issued after it. req.after_row is set here.
void stream_with_moves(PimChannel& ch, PimPlacement placement, StreamRequest req, std::int64_t n_rows,
                       std::int64_t moves, const char* phase);

}  // namespace aqpim::pim_detail
