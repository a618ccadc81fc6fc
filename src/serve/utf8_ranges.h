#pragma once
// Code-point ranges as the UTF-8 byte sequences that encode them, for the byte automata of the
// regexes (regex_dfa.h) and the grammars (grammar.h).

#include <utility>
#include <vector>

namespace aqpim::serve {

using ByteRanges = std::vector<std::pair<unsigned char, unsigned char>>;  ///< one per byte of a sequence

/// Appends to `out` byte-range sequences whose products are exactly the UTF-8 encodings of the
/// code points lo..hi, surrogates left out: split where the encoded length changes, then wherever
/// a continuation byte's range would not be full, until each byte position varies independently.
void utf8_sequences(char32_t lo, char32_t hi, std::vector<ByteRanges>& out);

}  // namespace aqpim::serve
