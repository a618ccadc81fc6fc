// Names, validation and histograms of the serving engine's public types.

#include <algorithm>

#include "aqpim/error.h"
#include "serve/engine.h"

namespace aqpim::serve {

void EngineOptions::validate() const {
    AQPIM_CHECK(!kv.empty(), "serve: --kv is empty");
    AQPIM_CHECK(kv_budget_bytes > 0, "serve: --kv-budget must be > 0 bytes");
    AQPIM_CHECK(parallel >= 1 && parallel <= 4096, "serve: --parallel {} outside [1, 4096]", parallel);
    AQPIM_CHECK(ctx >= 0, "serve: context {} is negative", ctx);
    AQPIM_CHECK(threads >= 0, "serve: threads {} is negative", threads);
    AQPIM_CHECK(queue_capacity >= 0, "serve: queue capacity {} is negative", queue_capacity);
    AQPIM_CHECK(prefill_chunk >= 1, "serve: prefill chunk {} must be >= 1", prefill_chunk);
    AQPIM_CHECK(kv_store.empty() || (kv_store_block >= 1 && kv_store_block % prefill_chunk == 0),
                "serve: --kv-store-block {} must be a positive multiple of --prefill-chunk {} (a block ends where a "
                "prefill chunk does)", kv_store_block, prefill_chunk);
    AQPIM_CHECK(kv_store_tail_every >= 1, "serve: --kv-store-tail-every {} must be >= 1", kv_store_tail_every);
}

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::stop: return "stop";
        case FinishReason::length: return "length";
        case FinishReason::cancelled: return "cancelled";
        case FinishReason::error: return "error";
        default: return "";
    }
}

const char* slot_phase_name(SlotPhase p) {
    switch (p) {
        case SlotPhase::prefill: return "prefill";
        case SlotPhase::decode: return "decode";
        case SlotPhase::parked: return "parked";
        case SlotPhase::fetch: return "fetch";
        case SlotPhase::spilled: return "spilled";
        case SlotPhase::cached: return "cached";
        default: return "idle";
    }
}

void Histogram::observe(double x) {
    if (counts.size() != bounds.size() + 1) counts.assign(bounds.size() + 1, 0);
    const auto it = std::lower_bound(bounds.begin(), bounds.end(), x);  // first bound >= x
    ++counts[std::size_t(it - bounds.begin())];
    sum += x;
    ++count;
}

}  // namespace aqpim::serve
