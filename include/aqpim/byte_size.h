#pragma once
// Sizes as people write them: "2GiB", "512MB", "24e9", "1048576".

#include <cstdint>
#include <string>
#include <string_view>

namespace aqpim {

/// Bytes of `text`: a positive number and an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB).
/// Anything else is an aqpim::Error starting with `what` (the option or field it came from).
std::uint64_t parse_byte_size(const std::string& text, std::string_view what);

}  // namespace aqpim
