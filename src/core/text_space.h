#pragma once
// Whitespace at the ends of a text (ASCII space, tab, CR, LF), one definition for the option
// parsers, the tool-call reader and the retrieval scorer.

#include <string_view>

namespace aqpim {

inline constexpr std::string_view kSpaceBytes = " \t\r\n";

/// `s` without leading whitespace.
inline std::string_view trim_leading_space(std::string_view s) {
    const std::size_t a = s.find_first_not_of(kSpaceBytes);
    return a == std::string_view::npos ? std::string_view() : s.substr(a);
}

/// `s` without whitespace at either end.
inline std::string_view trim_space(std::string_view s) {
    s = trim_leading_space(s);
    return s.substr(0, s.find_last_not_of(kSpaceBytes) + 1);
}

}  // namespace aqpim
