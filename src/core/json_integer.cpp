// A JSON integer within a range (aqpim/json_integer.h).

#include "aqpim/json_integer.h"

#include <nlohmann/json.hpp>

namespace aqpim {

std::optional<std::int64_t> json_integer_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer()) return std::nullopt;
    if (v.is_number_unsigned()) {
        const std::uint64_t u = v.get<std::uint64_t>();
        if (hi < 0 || u > std::uint64_t(hi)) return std::nullopt;
        const std::int64_t x = std::int64_t(u);
        if (x < lo) return std::nullopt;
        return x;
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < lo || x > hi) return std::nullopt;
    return x;
}

}  // namespace aqpim
