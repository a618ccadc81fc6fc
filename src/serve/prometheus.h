#pragma once
// GET /metrics: the engine's and the HTTP layer's counters in Prometheus' text format (0.0.4).

#include <cstdint>
#include <map>
#include <string>

#include "serve/engine.h"

namespace aqpim::serve {

/// What the HTTP layer counts itself.
struct HttpCounters {
    std::map<int, std::uint64_t> responses_by_status;  ///< every answered request, by HTTP status
    std::uint64_t disconnects = 0;                     ///< requests cancelled because the client went away
};

/// Every metric, each with # HELP and # TYPE; histograms cumulative with le="+Inf", _sum, _count.
std::string prometheus_text(const EngineStats& stats, const HttpCounters& http);

}  // namespace aqpim::serve
