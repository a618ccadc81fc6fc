#pragma once
// KIVI (Liu et al., 2024): keys quantized per channel over groups of g tokens, values per token in
// groups of g channels, both asymmetric (f16 scale and min per group), the most recent tokens in f16.

#include <cstdint>
#include <memory>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"

namespace aqpim::kv {

struct KiviParams {
    int bits = 2;
    int g = 32;          ///< tokens per key group, channels per value group (divides head_dim)
    int window = 128;    ///< recent tokens kept f16 (at least; up to window + g - 1)
};

/// Tokens quantized when n are stored: the oldest floor(max(0, n - window) / g) * g.
std::int64_t kivi_quantized_tokens(std::int64_t n, const KiviParams& p);

/// The cache (bits in 1..8, g >= 1 dividing head_dim, window >= 0, else aqpim::Error).
std::unique_ptr<KvCache> make_kivi_kv_cache(const KiviParams& params, const KvShape& shape,
                                            const KvCacheOptions& options);

}  // namespace aqpim::kv
