// Code-point ranges as UTF-8 byte-range sequences (utf8_ranges.h).

#include "serve/utf8_ranges.h"

namespace aqpim::serve {

namespace {

int utf8_length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void utf8_encode(char32_t c, unsigned char* out) {
    switch (utf8_length(c)) {
        case 1: out[0] = static_cast<unsigned char>(c); break;
        case 2: out[0] = static_cast<unsigned char>(0xC0 | (c >> 6)), out[1] = static_cast<unsigned char>(0x80 | (c & 0x3F)); break;
        case 3:
            out[0] = static_cast<unsigned char>(0xE0 | (c >> 12)), out[1] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F));
            out[2] = static_cast<unsigned char>(0x80 | (c & 0x3F));
            break;
        default:
            out[0] = static_cast<unsigned char>(0xF0 | (c >> 18)), out[1] = static_cast<unsigned char>(0x80 | ((c >> 12) & 0x3F));
            out[2] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F)), out[3] = static_cast<unsigned char>(0x80 | (c & 0x3F));
    }
}

}  // namespace

void utf8_sequences(char32_t lo, char32_t hi, std::vector<ByteRanges>& out) {
    if (lo > hi) return;
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
        if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
        return;
    }
    for (const char32_t edge : {char32_t(0x7F), char32_t(0x7FF), char32_t(0xFFFF)})
        if (lo <= edge && hi > edge) {
            utf8_sequences(lo, edge, out);
            utf8_sequences(edge + 1, hi, out);
            return;
        }
    const int n = utf8_length(lo);
    for (int i = 1; i < n; ++i) {
        const char32_t low_bits = (char32_t(1) << (6 * i)) - 1;
        if ((lo & ~low_bits) == (hi & ~low_bits)) continue;
        if ((lo & low_bits) != 0) {
            utf8_sequences(lo, lo | low_bits, out);
            utf8_sequences((lo | low_bits) + 1, hi, out);
            return;
        }
        if ((hi & low_bits) != low_bits) {
            utf8_sequences(lo, (hi & ~low_bits) - 1, out);
            utf8_sequences(hi & ~low_bits, hi, out);
            return;
        }
    }
    unsigned char a[4], b[4];
    utf8_encode(lo, a);
    utf8_encode(hi, b);
    ByteRanges seq;
    for (int k = 0; k < n; ++k) seq.emplace_back(a[k], b[k]);
    out.push_back(std::move(seq));
}

}  // namespace aqpim::serve
