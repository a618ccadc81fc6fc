#pragma once
// Checks of numeric options beyond CLI11's own: CLI::Range lets "nan" through (every comparison
// with NaN is false), and options whose unset default is a sentinel ("0 = the device's") need the
// sentinel refused when it is given explicitly.

#include <CLI/CLI.hpp>

#include <cctype>
#include <cmath>
#include <string>

namespace aqpim::cli {

/// A finite number in [lo, hi], or in (lo, hi] when `open_low`.
inline CLI::Validator finite_range(double lo, double hi, bool open_low = false) {
    const std::string range = (open_low ? "(" : "[") + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v) || v > hi || (open_low ? v <= lo : v < lo))
                return "value " + text + " is not a finite number in " + range;
            return "";
        },
        "FLOAT in " + range);
}

/// A whole number >= 0 (for unsigned options: CLI11 would read "-1" as 2^64 - 1).
inline CLI::Validator non_negative_integer() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            const auto first = text.find_first_not_of(" \t");
            if (first == std::string::npos || !std::isdigit(static_cast<unsigned char>(text[first])))
                return "value " + text + " is not a whole number >= 0";
            return "";
        },
        "UINT");
}

}  // namespace aqpim::cli
