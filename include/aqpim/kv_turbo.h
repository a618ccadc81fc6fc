#pragma once
// The 2025-26 KV-quantization baselines adaptive PQ is compared against (docs/kv-baselines.md):
//
//   turbo[:bits=3.5,qjl=0,sel=128,window=0,seed=1,attn=fast]
//       TurboQuant (Zandieh et al., ICLR 2026, arXiv 2504.19874): each head row rotated by a seeded
//       random rotation and every coordinate coded with the Lloyd-Max codebook of the rotated
//       coordinate's known distribution (norm kept in f16); bits in 1..4, fractional bits B put
//       (B - floor B) * head_dim outlier channels (chosen from the first `sel` tokens' channel
//       energies) at floor(B) + 1 bits in a second, independent instance. qjl=1: keys as
//       TurboQuant_prod (bits - 1 Lloyd-Max bits and a 1-bit QJL sketch of the residual).
//   qjl[:m=2*head_dim,outliers=head_dim/16,outlier_m=16*outliers,sel=128,window=0,values=int2,vg=32,seed=1,attn=fast]
//       QJL keys (Zandieh et al., arXiv 2406.03482): m signs of a Gaussian projection of each key and
//       its norm, the unbiased estimator of q·k; `outliers` channels (chosen as above) in their own
//       sketch of outlier_m signs. Values per token: f16, q8_0, q4_0 or intB (B = 1..8, groups of vg).
//
// attn=decode attends by decoding every row back to the original coordinates (the reference the
// default rotated-domain attention is tested against). Every cache honours KvCacheOptions::memory_budget.

#include <memory>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"

namespace aqpim {

/// "turbo", "qjl": the names make_turbo_kv_cache builds.
const std::vector<std::string>& turbo_kv_scheme_names();
bool is_turbo_kv_scheme(const std::string& name);

/// The cache a turbo or qjl spec names; an unknown key, a value out of range or a combination that
/// cannot be coded is an aqpim::Error naming the key.
std::unique_ptr<KvCache> make_turbo_kv_cache(const KvSchemeSpec& spec, const KvShape& shape,
                                             const KvCacheOptions& options = {});

}  // namespace aqpim
