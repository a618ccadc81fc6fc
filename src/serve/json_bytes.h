#pragma once
// Byte classes and the number grammar of JSON text (RFC 8259), shared by JSON mode's and the
// schemas' recognizers.

#include <cstdint>

namespace aqpim::serve {

inline bool json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
inline bool json_digit(unsigned char c) { return c >= '0' && c <= '9'; }
/// The value of a hex digit, or -1.
inline int json_hex_value(unsigned char c) {
    return json_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/// The byte a short escape (the letter after '\\') stands for: '"', '\\', '/', b, f, n, r, t; -1
/// for any other letter ('u' included).
inline int json_short_escape(unsigned char c) {
    switch (c) {
        case '"': case '\\': case '/': return c;
        case 'b': return '\b';
        case 'f': return '\f';
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        default: return -1;
    }
}

/// Where a number is in its grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
enum class JsonNumber : std::uint8_t { minus, zero, integer, point, fraction, exponent, exponent_sign, exponent_digits };
enum class NumberStep : std::uint8_t { taken, ended, refused };

/// The state after a number's first byte ('-' or a digit).
inline JsonNumber json_number_start(unsigned char c) {
    return c == '-' ? JsonNumber::minus : c == '0' ? JsonNumber::zero : JsonNumber::integer;
}

/// Reads byte c of a number in state s: taken (s moves on), refused, or ended (the number ended
/// before c, which belongs to what follows it). `integer_only`: no fraction, no exponent.
inline NumberStep json_number_step(JsonNumber& s, unsigned char c, bool integer_only = false) {
    switch (s) {
        case JsonNumber::minus:
            if (!json_digit(c)) return NumberStep::refused;
            s = c == '0' ? JsonNumber::zero : JsonNumber::integer;
            return NumberStep::taken;
        case JsonNumber::point:
            if (!json_digit(c)) return NumberStep::refused;
            s = JsonNumber::fraction;
            return NumberStep::taken;
        case JsonNumber::exponent:
            if (c == '+' || c == '-') {
                s = JsonNumber::exponent_sign;
                return NumberStep::taken;
            }
            [[fallthrough]];
        case JsonNumber::exponent_sign:
            if (!json_digit(c)) return NumberStep::refused;
            s = JsonNumber::exponent_digits;
            return NumberStep::taken;
        default: break;  // zero, integer, fraction, exponent_digits: the number may end here
    }
    if (json_digit(c) && s != JsonNumber::zero) return NumberStep::taken;
    if (!integer_only && c == '.' && (s == JsonNumber::zero || s == JsonNumber::integer)) {
        s = JsonNumber::point;
        return NumberStep::taken;
    }
    if (!integer_only && (c == 'e' || c == 'E') && s != JsonNumber::exponent_digits) {
        s = JsonNumber::exponent;
        return NumberStep::taken;
    }
    return NumberStep::ended;
}

}  // namespace aqpim::serve
