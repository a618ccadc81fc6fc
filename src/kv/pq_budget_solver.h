#pragma once
// `pq:bits=B[,ctx=L]`: the settings that spend B bits per element best (docs/kv-pq.md, "The bits=
// solver"). Everything that costs bits and that the spec leaves open is chosen here, before any data:
// the window and its storage (wq), the calibration length, the sinks, the code width (nbits), the
// codebook precision and the refresh schedule; the split of the code width over layers, keys and
// values (m) is chosen later from the sequence's own calibration error (pq_codebooks.cpp).

#include <cstdint>
#include <string>
#include <vector>

#include "aqpim/kv_pq.h"

namespace aqpim::kv {

/// One setting of the keys the solver chooses, and what it predicts for it.
struct PqBudgetChoice {
    PqKvParams params;
    double peak_bits = 0;      ///< most bits/element (per element of ctx) one sequence holds on its way to ctx
    double code_bits = 0;      ///< bits per coded element the page width gives
    double predicted_kl = 0;   ///< the error model's figure (a ranking, not a promise)
};

/// The best setting within the budget: `given` with every key not in `given_keys` free (given.bits > 0,
/// ctx > 0). A budget no setting reaches is an aqpim::Error naming the lowest reachable peak.
PqBudgetChoice solve_pq_budget(const PqKvParams& given, const std::vector<std::string>& given_keys,
                               const KvShape& shape, std::int64_t ctx);

/// The solver's error model (fitted on the tuning half, docs/kv-pq.md): predicted mean KL of a
/// setting whose codes carry code_bits bits per coded element.
double pq_predicted_kl(const PqKvParams& p, double code_bits);

}  // namespace aqpim::kv
