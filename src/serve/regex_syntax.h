#pragma once
// The pattern parser of regex_dfa.h: ECMAScript syntax (the subset listed there) into a tree of
// code-point sets, sequences, alternatives and repetitions.

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace aqpim::serve::regex {

/// Sorted, disjoint, inclusive ranges of code points.
using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

struct Node {
    enum class Kind : std::uint8_t { empty, chars, sequence, alternatives, repeat };
    Kind kind = Kind::empty;
    CodeRanges chars;        ///< chars: one code point of these
    std::vector<int> kids;   ///< sequence, alternatives; repeat: the operand
    int min = 0, max = 0;    ///< repeat: max -1 is unbounded
};

struct Tree {
    std::vector<Node> nodes;
    int root = -1;
};

/// Parses `pattern` (UTF-8). search: an alternative without '^' may start anywhere in the text,
/// one without '$' end anywhere (any text is allowed around it). Throws RegexError.
Tree parse(std::string_view pattern, bool search);

}  // namespace aqpim::serve::regex
