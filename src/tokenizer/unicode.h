#pragma once
// UTF-8 and GPT-2 byte-level helpers for the tokenizers. Invalid UTF-8 never throws: a bad lead or
// continuation byte counts as one code point U+FFFD of length 1 (so every byte is consumed once).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace aqpim::unicode {

/// Length of the UTF-8 sequence announced by a lead byte, as llama.cpp's unicode_len_utf8:
/// 0x00-0xBF -> 1, 0xC0-0xDF -> 2, 0xE0-0xEF -> 3, 0xF0-0xFF -> 4 (callers clamp to what is left).
inline std::size_t utf8_len(unsigned char lead) {
    static constexpr std::uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[lead >> 4];
}

/// Decode the code point at s[pos] and advance pos; invalid sequences give U+FFFD and advance by 1.
std::uint32_t next_codepoint(std::string_view s, std::size_t& pos);
/// Append the UTF-8 encoding of cp (cp <= 0x10FFFF).
void append_utf8(std::string& out, std::uint32_t cp);

/// GPT-2 byte-to-unicode map: printable bytes (33-126, 161-172, 174-255) map to themselves, the
/// other 68 bytes to U+0100.. in byte order. Returns the UTF-8 text of the mapped code point.
const std::string& byte_to_unicode(std::uint8_t b);
/// Inverse of byte_to_unicode for one code point; -1 if cp is not the image of a byte.
int unicode_to_byte(std::uint32_t cp);

/// Parse a SentencePiece byte token "<0xXX>" (upper- or lower-case hex); -1 if text is not one.
int parse_byte_token(std::string_view text);
/// The byte token text "<0xXX>" (upper-case hex, as SentencePiece and llama.cpp write it).
std::string byte_token_text(std::uint8_t b);

/// Replace every " " by U+2581 "▁" (SentencePiece's whitespace escape), and back.
std::string escape_whitespace(std::string_view text);
std::string unescape_whitespace(std::string_view text);

}  // namespace aqpim::unicode
