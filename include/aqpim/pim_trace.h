#pragma once
// Trace-driven PIM workloads: one decode step of a KV trace recorded by `aqpim run --trace`
// (include/aqpim/kv_trace.h) turned into the shape and PQ state the simulator needs.

#include <cstdint>

#include "aqpim/kv_trace.h"
#include "aqpim/pim_attention.h"

namespace aqpim {

struct PimTraceStep {
    std::int64_t step = 0;
    int n_seqs = 0;
    PimAttentionShape shape;       ///< kv_heads = layers x KV heads x sequences; context = longest + the step's token
    std::int64_t f16_tokens = 0;   ///< most uncoded tokens of any (layer, sequence), the step's token included
    int versions = 1;              ///< most codebook versions in use by any (layer, sequence)
    std::int64_t pages = 0;        ///< code pages of the longest (layer, sequence)
};

/// The step `step` of the trace (-1: the last). Error if the trace has no such step.
PimTraceStep pim_trace_step(const KvTrace& trace, std::int64_t step);

}  // namespace aqpim
