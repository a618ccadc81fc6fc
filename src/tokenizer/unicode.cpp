#include "tokenizer/unicode.h"

#include <array>

namespace aqpim::unicode {

namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

struct ByteMap {
    std::array<std::string, 256> to_unicode;
    std::array<std::int16_t, 512> from_cp;  // code points < 512 only (the map's image is < 0x144)
    ByteMap() {
        from_cp.fill(-1);
        int n_shifted = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            const std::uint32_t cp = printable ? std::uint32_t(b) : std::uint32_t(256 + n_shifted++);
            append_utf8(to_unicode[b], cp);
            from_cp[cp] = std::int16_t(b);
        }
    }
};

const ByteMap& byte_map() {
    static const ByteMap m;
    return m;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    std::size_t pos = 0;
    while (true) {
        const std::size_t hit = text.find(from, pos);
        if (hit == std::string_view::npos) break;
        out.append(text.substr(pos, hit - pos));
        out.append(to);
        pos = hit + from.size();
    }
    out.append(text.substr(pos));
    return out;
}

}  // namespace

std::uint32_t next_codepoint(std::string_view s, std::size_t& pos) {
    const auto c0 = static_cast<unsigned char>(s[pos]);
    if (c0 < 0x80) {
        ++pos;
        return c0;
    }
    std::size_t n = 0;
    std::uint32_t cp = 0, min_cp = 0;
    if ((c0 & 0xE0) == 0xC0) {
        n = 2, cp = c0 & 0x1F, min_cp = 0x80;
    } else if ((c0 & 0xF0) == 0xE0) {
        n = 3, cp = c0 & 0x0F, min_cp = 0x800;
    } else if ((c0 & 0xF8) == 0xF0) {
        n = 4, cp = c0 & 0x07, min_cp = 0x10000;
    } else {
        ++pos;
        return 0xFFFD;
    }
    if (pos + n > s.size()) {
        ++pos;
        return 0xFFFD;
    }
    for (std::size_t i = 1; i < n; ++i) {
        const auto c = static_cast<unsigned char>(s[pos + i]);
        if ((c & 0xC0) != 0x80) {
            ++pos;
            return 0xFFFD;
        }
        cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        ++pos;
        return 0xFFFD;
    }
    pos += n;
    return cp;
}

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(char(cp));
    } else if (cp < 0x800) {
        out.push_back(char(0xC0 | (cp >> 6)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(char(0xE0 | (cp >> 12)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(char(0xF0 | (cp >> 18)));
        out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    }
}

const std::string& byte_to_unicode(std::uint8_t b) { return byte_map().to_unicode[b]; }

int unicode_to_byte(std::uint32_t cp) { return cp < 512 ? byte_map().from_cp[cp] : -1; }

int parse_byte_token(std::string_view text) {
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    const int hi = hex(text[3]), lo = hex(text[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string byte_token_text(std::uint8_t b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    return std::string{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
}

std::string escape_whitespace(std::string_view text) { return replace_all(text, " ", kSpaceEscape); }

std::string unescape_whitespace(std::string_view text) { return replace_all(text, kSpaceEscape, " "); }

}  // namespace aqpim::unicode
