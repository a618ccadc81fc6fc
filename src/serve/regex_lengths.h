#pragma once
// A string that must match an automaton (a `pattern` or a `format`) and hold between min and max
// characters (JSON Schema's minLength / maxLength beside it): which states can still end in a
// match of an admissible length. Without it the mask could lead a string where the automaton
// goes on but no match of the right length does (`^(ab)+$` with maxLength 3 after "ab").
//
// Characters are code points: a byte that is not a UTF-8 continuation byte (0x80-0xBF) begins
// one. Per state, a bitset over lengths L: with a max, bit L says a match ends exactly L more
// characters on (L <= max); without one, bits below min say the same and bit min says "min or
// more".

#include <cstdint>
#include <vector>

#include "serve/regex_dfa.h"

namespace aqpim::serve {

class RegexLengths {
public:
    /// `max_chars` -1: no upper bound (then `min_chars` > 0). Throws RegexError when the table
    /// would take more than `max_work` steps (lengths x the automaton's transitions) or no match
    /// of the automaton has an admissible length.
    RegexLengths(const RegexDfa& dfa, std::int64_t min_chars, std::int64_t max_chars, std::uint64_t max_work);

    /// Whether a match can still end, from `state` with `chars` characters written, at a length
    /// within the bounds.
    bool feasible(std::int32_t state, std::int64_t chars) const;
    std::int64_t min_chars() const { return min_; }
    /// With `chars` written, every text the automaton reads from any state up to this many more
    /// characters leaves a feasible state (the mask's test of whether a token needs trying whole).
    std::int64_t exact_within(std::int64_t chars) const;
    std::uint64_t work() const { return work_; }
    std::size_t bytes() const { return bits_.size() * sizeof(std::uint64_t); }

private:
    std::int64_t min_, max_;
    std::int64_t most_to_end_ = 0;     ///< with a max: the most characters a state needs to end a match (its fewest)
    std::size_t words_ = 0;            ///< per state
    std::vector<std::uint64_t> bits_;  ///< [state][length]
    std::uint64_t work_ = 0;
};

}  // namespace aqpim::serve
