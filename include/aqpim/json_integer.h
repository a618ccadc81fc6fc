#pragma once
// A JSON integer read into a C++ integer without a conversion: nlohmann holds an integer above
// int64's range as unsigned (and one above uint64's as a double), and get<std::int64_t>() of
// either wraps or is undefined. The readers of config.json, KV traces and API requests use this.

#include <cstdint>
#include <optional>

#include <nlohmann/json_fwd.hpp>

namespace aqpim {

/// v as an integer in [lo, hi]; nullopt when v is not a JSON integer (3.5 and 1e30 are not) or
/// lies outside the range.
std::optional<std::int64_t> json_integer_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi);

}  // namespace aqpim
