#include "aqpim/byte_size.h"

#include <map>

#include "aqpim/error.h"

namespace aqpim {

std::uint64_t parse_byte_size(const std::string& text, std::string_view what) {
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    AQPIM_CHECK(used > 0, "{} {}: not a size (e.g. 80GiB, 512MB, 24e9)", what, text);
    const std::string unit = text.substr(used);
    const std::map<std::string, double> units = {{"", 1.0},         {"B", 1.0},   {"KB", 1e3},  {"MB", 1e6},
                                                 {"GB", 1e9},       {"TB", 1e12}, {"KiB", 1024.0},
                                                 {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    const auto it = units.find(unit);
    AQPIM_CHECK(it != units.end(), "{} {}: unknown unit '{}' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", what, text, unit);
    AQPIM_CHECK(v > 0 && v * it->second < 1.8e19, "{} {}: out of range", what, text);
    return std::uint64_t(v * it->second);
}

}  // namespace aqpim
