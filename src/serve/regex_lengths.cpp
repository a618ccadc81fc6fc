// Which match lengths each automaton state can still reach (regex_lengths.h).

#include "serve/regex_lengths.h"

#include <algorithm>
#include <limits>
#include <string>

namespace aqpim::serve {

RegexLengths::RegexLengths(const RegexDfa& dfa, std::int64_t min_chars, std::int64_t max_chars, std::uint64_t max_work)
    : min_(min_chars), max_(max_chars) {
    const std::size_t n = dfa.n_states();
    const std::int64_t top = max_ >= 0 ? max_ : min_;  // the highest bit
    // The transitions backwards, each (source, target, weight) once: weight 1 on a byte that begins
    // a character, 0 on a continuation byte.
    std::vector<std::vector<std::int32_t>> pre[2];
    pre[0].resize(n);
    pre[1].resize(n);
    std::vector<std::int32_t> stamp[2] = {std::vector<std::int32_t>(n, -1), std::vector<std::int32_t>(n, -1)};
    std::size_t edges = 0;
    for (std::size_t s = 0; s < n; ++s)
        for (int b = 0; b < 256; ++b) {
            const std::int32_t t = dfa.next(std::int32_t(s), static_cast<unsigned char>(b));
            const int w = (b & 0xC0) != 0x80;
            if (t == RegexDfa::kDead || stamp[w][std::size_t(t)] == std::int32_t(s)) continue;
            stamp[w][std::size_t(t)] = std::int32_t(s);
            pre[w][std::size_t(t)].push_back(std::int32_t(s));
            ++edges;
        }
    const std::uint64_t per_level = std::uint64_t(n) + edges;
    const std::uint64_t levels = std::uint64_t(top + 1) * (max_ >= 0 ? 1 : 2);
    work_ = std::uint64_t(n) * 256 + levels * per_level;
    if (top >= std::int64_t(max_work) || work_ > max_work)
        throw RegexError(RegexError::kNoOffset, "bounding its text to " + std::to_string(top) +
                                                    " characters is too complex");
    words_ = std::size_t(top / 64 + 1);
    bits_.assign(n * words_, 0);

    std::vector<std::int32_t> stack;
    // set := the states that reach it through continuation bytes alone, too.
    const auto close0 = [&](std::vector<std::uint8_t>& set) {
        stack.clear();
        for (std::size_t s = 0; s < n; ++s)
            if (set[s]) stack.push_back(std::int32_t(s));
        while (!stack.empty()) {
            const std::int32_t x = stack.back();
            stack.pop_back();
            for (const std::int32_t s : pre[0][std::size_t(x)])
                if (!set[std::size_t(s)]) set[std::size_t(s)] = 1, stack.push_back(s);
        }
    };
    // One more character: the states with a character's first byte into `set`, closed.
    const auto one_more = [&](const std::vector<std::uint8_t>& set) {
        std::vector<std::uint8_t> before(n, 0);
        bool any = false;
        for (std::size_t x = 0; x < n; ++x)
            if (set[x])
                for (const std::int32_t s : pre[1][x]) before[std::size_t(s)] = 1, any = true;
        if (any) close0(before);
        return before;
    };
    const auto mark = [&](const std::vector<std::uint8_t>& set, std::int64_t length) {
        for (std::size_t s = 0; s < n; ++s)
            if (set[s]) bits_[s * words_ + std::size_t(length >> 6)] |= std::uint64_t(1) << (length & 63);
    };
    // Exactly L characters to a match: from the accepting states backwards, one character a level.
    std::vector<std::uint8_t> exact(n, 0);
    for (std::size_t s = 0; s < n; ++s) exact[s] = dfa.accepting(std::int32_t(s));
    close0(exact);
    const std::int64_t exact_top = max_ >= 0 ? max_ : min_ - 1;
    for (std::int64_t length = 0; length <= exact_top; ++length) {
        if (std::find(exact.begin(), exact.end(), 1) == exact.end()) break;
        mark(exact, length);
        if (length < exact_top) exact = one_more(exact);
    }
    if (max_ < 0) {  // min or more characters: from every state (each reaches a match), min levels back
        std::vector<std::uint8_t> at_least(n, 1);
        for (std::int64_t length = 1; length <= min_; ++length) at_least = one_more(at_least);
        mark(at_least, min_);
    }
    if (max_ >= 0)
        for (std::size_t s = 0; s < n; ++s)
            for (std::size_t w = 0; w < words_; ++w)
                if (const std::uint64_t word = bits_[s * words_ + w]) {
                    most_to_end_ = std::max<std::int64_t>(most_to_end_, std::int64_t(w) * 64 + __builtin_ctzll(word));
                    break;
                }
    if (!feasible(dfa.start(), 0))
        throw RegexError(RegexError::kNoOffset, "no text it matches has " +
                                                    (max_ < 0 ? "at least " + std::to_string(min_)
                                                              : "between " + std::to_string(min_) + " and " + std::to_string(max_)) +
                                                    " characters");
}

std::int64_t RegexLengths::exact_within(std::int64_t chars) const {
    // Below min a step can lead where no match is long enough; at or above it only the max binds,
    // and a state k characters on is feasible while k + its fewest characters to a match fit.
    if (chars < min_) return 0;
    if (max_ < 0) return std::numeric_limits<std::int64_t>::max();
    return std::max<std::int64_t>(0, max_ - chars - most_to_end_);
}

bool RegexLengths::feasible(std::int32_t state, std::int64_t chars) const {
    const std::int64_t lo = std::max<std::int64_t>(0, min_ - chars);
    std::int64_t hi;
    if (max_ >= 0) {
        if (chars > max_) return false;
        hi = max_ - chars;
    } else {
        if (lo == 0) return true;  // every state the automaton reaches goes on to a match
        hi = min_;
    }
    for (std::int64_t w = lo >> 6; w <= hi >> 6; ++w) {
        std::uint64_t word = bits_[std::size_t(state) * words_ + std::size_t(w)];
        if (w == lo >> 6) word &= ~std::uint64_t(0) << (lo & 63);
        if (w == hi >> 6 && (hi & 63) != 63) word &= (std::uint64_t(1) << ((hi & 63) + 1)) - 1;
        if (word) return true;
    }
    return false;
}

}  // namespace aqpim::serve
