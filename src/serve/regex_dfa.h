#pragma once
// Regular expressions for structured outputs (docs/serve.md "Patterns"): JSON Schema's `pattern`
// and a whole-output regex, compiled into a deterministic automaton over UTF-8 bytes, so that a
// recognizer steps it one byte at a time and the token mask can refuse a byte the moment no text
// the pattern accepts continues with it.
//
// The syntax is ECMAScript's (JSON Schema's dialect) without what a finite automaton cannot do or
// a pattern rarely needs: alternation, groups ((...), (?:...), (?<name>...)), the quantifiers * + ?
// {n} {n,} {n,m} (lazy forms accepted: the same texts match), '.', classes with ranges and
// negation, the escapes \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH \u{H...} \cX and escaped
// punctuation, '^' at the start and '$' at the end of the pattern or of one of its top-level
// alternatives. Refused with RegexError (naming the byte offset): back-references, lookaround,
// word boundaries, Unicode property escapes, anchors elsewhere.

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "serve/json_constraint.h"

namespace aqpim::serve {

class TokenSetCache;  // json_constraint.h

/// A pattern the compiler refuses, or one too large for the limits below.
class RegexError : public std::runtime_error {
public:
    static constexpr std::size_t kNoOffset = ~std::size_t(0);  ///< a limit of the whole pattern, not of one place
    /// "at byte OFFSET of the pattern: MESSAGE" (just MESSAGE with kNoOffset).
    RegexError(std::size_t offset, const std::string& message);
};

class RegexDfa {
public:
    static constexpr std::size_t kMaxPatternBytes = 4096;
    static constexpr int kMaxRepeat = 1000;              ///< n and m of {n,m}
    static constexpr std::size_t kMaxNfaStates = 50000;   ///< before determinization (repetitions copy their operand)
    static constexpr std::size_t kMaxStates = 8192;      ///< of the automaton
    static constexpr std::size_t kMaxTableBytes = std::size_t(2) << 20;  ///< its transition table: states x byte classes
    /// Steps of building and determinizing (NFA states made, closures walked and sorted, sets hashed):
    /// the bound on a pattern's compile time, about 8 ms here (a hostile pattern is refused).
    static constexpr std::uint64_t kMaxWork = std::uint64_t(1) << 22;
    static constexpr std::int32_t kDead = -1;

    /// whole: the text must match the pattern from its first byte to its last (a `$`-free regex
    /// constraint, as vLLM's guided_regex); search: somewhere in it (JSON Schema: `pattern` is
    /// unanchored unless it says ^ or $).
    enum class Match : std::uint8_t { whole, search };

    /// `writable`: the bytes a text may hold. A transition that only leads on through bytes outside
    /// it to an accepting state is cut, so every state next() returns can still end in a match.
    /// `max_work` bounds the determinization's steps (a hostile pattern is refused, not slow).
    /// Throws RegexError when the pattern is refused or matches no writable text.
    RegexDfa(std::string_view pattern, Match match, const std::bitset<256>& writable,
             std::uint64_t max_work = kMaxWork);
    RegexDfa(RegexDfa&&) noexcept;
    ~RegexDfa();

    std::int32_t start() const { return start_; }
    /// The state after `byte`, or kDead when no match goes on with it.
    std::int32_t next(std::int32_t state, unsigned char byte) const {
        return table_[std::size_t(state) * n_classes_ + class_of_[byte]];
    }
    bool accepting(std::int32_t state) const { return accepting_[std::size_t(state)] & 1; }
    /// A match that no byte continues.
    bool final(std::int32_t state) const { return accepting_[std::size_t(state)] == 3; }
    std::size_t n_states() const { return accepting_.size(); }
    std::size_t table_bytes() const { return table_.size() * sizeof(std::int32_t); }
    std::uint64_t work() const { return work_; }  ///< steps the determinization took
    /// The tokens each state reads (the mask's cache, filled as states are masked).
    TokenSetCache& token_cache() const { return *token_cache_; }

private:
    unsigned char class_of_[256] = {};     ///< bytes that no transition tells apart share a class
    std::size_t n_classes_ = 0;
    std::vector<std::int32_t> table_;      ///< [state][class] -> state or kDead
    std::vector<std::uint8_t> accepting_;  ///< [state]: bit 0 a match, bit 1 no byte leads on
    std::int32_t start_ = 0;
    std::uint64_t work_ = 0;
    std::unique_ptr<TokenSetCache> token_cache_;
};

/// Reads the output text byte by byte against a whole-text pattern (a recognizer for mask_guided,
/// json_constraint.h): a small value, copied to try a continuation.
class RegexPrefix {
public:
    explicit RegexPrefix(const RegexDfa& dfa) : dfa_(&dfa), state_(dfa.start()) {}

    bool feed(std::string_view text) {
        for (const char c : text) {
            const std::int32_t next = dfa_->next(state_, static_cast<unsigned char>(c));
            if (next == RegexDfa::kDead) return false;
            state_ = next;
        }
        return true;
    }
    bool complete() const { return dfa_->final(state_); }
    bool can_end() const { return dfa_->accepting(state_); }
    std::int64_t string_room() const { return -1; }
    AutomatonAt automaton() const { return {dfa_, state_, false}; }

private:
    const RegexDfa* dfa_;
    std::int32_t state_;
};

}  // namespace aqpim::serve
