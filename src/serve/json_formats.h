#pragma once
// JSON Schema `format`s that structured outputs enforce (docs/serve.md "Formats"): each is a
// regular expression its whole string must match, compiled like a `pattern` (regex_dfa.h). The
// set is OpenAI's structured outputs' (date-time, time, date, duration, email, hostname, ipv4,
// ipv6, uuid) and `uri`, which pydantic writes for its URL types. Each expression is a subset of
// what its RFC admits, chosen so that strict parsers (Python's datetime, inet_pton, pydantic)
// read every text it matches; an unknown format stays an annotation.

#include <cstdint>
#include <string_view>
#include <vector>

namespace aqpim::serve {

struct JsonFormat {
    std::string_view name;     ///< the `format` value
    std::string_view regex;    ///< what the whole string matches (ECMAScript syntax, no anchors)
    std::int64_t max_chars;    ///< a length the RFC bounds the text to (-1: none beyond the regex)
    std::string_view meaning;  ///< for docs and errors
};

/// Every enforced format, in the order docs list them.
const std::vector<JsonFormat>& json_formats();
/// The format named `name`, or nullptr when it is not enforced (an annotation).
const JsonFormat* find_json_format(std::string_view name);

}  // namespace aqpim::serve
