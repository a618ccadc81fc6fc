#pragma once
// Typed `--kv` parameters shared by the scheme factories of src/kv.

#include <cstdint>
#include <string>

#include "aqpim/kv_scheme.h"

namespace aqpim::kv {

/// An integer parameter in [lo, hi] (a value outside is an error naming the scheme, the key and the range).
int int_param(const KvSchemeSpec& spec, const std::string& key, int fallback, std::int64_t lo, std::int64_t hi);

}  // namespace aqpim::kv
