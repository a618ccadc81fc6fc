#pragma once
// Shared pieces of the attention mappings (internal to src/pim): head placement, data-path
// command bursts, unit compute gaps.

#include <cstdint>

#include "aqpim/pim_attention.h"
#include "aqpim/pim_engine.h"
#include "core/int_math.h"

namespace aqpim::pim_detail {

/// KV heads on the busiest channel: heads go round-robin over devices x channels.
std::int64_t heads_on_busiest_channel(const DramSpec& spec, const PimAttentionShape& shape);

/// Issue n data-path commands (WRGB, MVSB, MVGB), cycling over pseudo channels and bank groups so
/// both buses and every group share them; the first no earlier than not_before. Returns the last cycle.
std::int64_t issue_datapath(PimChannel& ch, PimCmd c, std::int64_t n, std::int64_t not_before = 0);

/// Least cycles between two column commands of a unit that must do `ops` operations per column at
/// `per_cycle` operations per cycle, when that exceeds the command gap `min_gap` (else 0: timing only).
int unit_gap(std::int64_t ops, std::int64_t per_cycle, int min_gap);

/// Per-column command gap of a placement (nCCD_AB, nCCD_SB; the buffer die streams at nBL).
int column_gap(const DramSpec& spec, PimPlacement p);

/// Units that compute in parallel in a channel, and columns one access command reads.
int units_per_channel(const DramSpec& spec, PimPlacement p);

/// Fill the derived fields of a result (seconds, bandwidth, energy) from the channel and the totals.
void finish_result(PimResult& r, const PimChannel& ch, const PimAttentionShape& shape, double bytes_read,
                   double pim_ops, double op_energy, double io_bytes);

}  // namespace aqpim::pim_detail
