#pragma once
// Byte classes of JSON text (RFC 8259), shared by JSON mode's and the schemas' recognizers.

namespace aqpim::serve {

inline bool json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
inline bool json_digit(unsigned char c) { return c >= '0' && c <= '9'; }
/// The value of a hex digit, or -1.
inline int json_hex_value(unsigned char c) {
    return json_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

}  // namespace aqpim::serve
