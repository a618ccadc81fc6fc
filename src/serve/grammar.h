#pragma once
// GBNF grammars (llama.cpp's grammar format: llama-server's `grammar`, vLLM's
// structured_outputs.grammar and guided_grammar; docs/serve.md "Grammars"). Each rule is compiled
// into a byte automaton whose edges are byte ranges (a character as its UTF-8 sequences) or calls
// of other rules, and the recognizer holds a set of stacks of return states (a pushdown
// automaton), so nesting of any depth up to a bound (brackets, JSON) is held exactly.

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "serve/json_constraint.h"

namespace aqpim::serve {

/// A grammar refused: the message names the line and column.
class GrammarError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Grammar {
public:
    static constexpr std::size_t kMaxSourceBytes = 64 << 10;
    static constexpr int kMaxStates = 1 << 16;  ///< automaton states of all rules together
    static constexpr int kMaxRepeat = 1000;     ///< the largest m and n of {m,n}
    static constexpr int kMaxDepth = 256;       ///< nested rule calls a text may hold
    /// Stacks the recognizer holds at once (an ambiguous grammar's readings), and their entries
    /// (depths, returns and states) together: a byte that would make more is not read.
    static constexpr int kMaxStacks = 64;
    static constexpr std::size_t kMaxStackWords = 1024;
    /// Steps to follow every state's empty paths (a run of n optional elements takes n^2 / 2),
    /// and to check each closure the recognizer can start.
    static constexpr std::size_t kMaxReach = std::size_t(1) << 24;
    /// Stacks a closure visits (calls, returns): one from any state the recognizer can start one
    /// at, checked at compile time; and each byte's closures together at run time.
    static constexpr std::size_t kMaxClosureSteps = 128;
    static constexpr int kMaxNesting = 256;  ///< groups inside groups

    /// Parses and compiles `source` (UTF-8): rules `name ::= alternatives`, one per line (a
    /// rule goes on over lines inside parentheses and after `::=` or `|`), `root` the whole text;
    /// literals "...", classes [...] and [^...], `.`, groups, `|`, `*` `+` `?` `{m}` `{m,}` `{m,n}`
    /// `{,n}`, `#` comments. Refused (GrammarError naming where): syntax errors, undefined or
    /// twice-defined rules, no `root`, left recursion, a `root` that matches no text, token
    /// references (<...>), and grammars past the bounds above.
    explicit Grammar(std::string_view source);

    struct Edge {
        std::int32_t to = 0;     ///< the next state (a call: the state its rule returns to)
        std::int32_t call = -1;  ///< >= 0: calls this rule; kBytes: bytes lo..hi; kEmpty: reads nothing
        unsigned char lo = 0, hi = 0;
    };
    static constexpr std::int32_t kBytes = -1, kEmpty = -2;

    int n_states() const { return int(edges_.size()); }
    int n_rules() const { return int(rule_start_.size()); }

private:
    friend class GrammarPrefix;
    friend struct GrammarBuilder;
    std::vector<std::vector<Edge>> edges_;  ///< [state] its edges
    std::vector<std::int32_t> rule_of_;     ///< [state] the rule it belongs to
    std::vector<std::int32_t> rule_start_, rule_end_;
    std::vector<std::string> rule_names_;
    std::int32_t root_ = -1;
    /// [state] what its empty edges reach within its rule: the states that read bytes, the calls
    /// (callee, the state it returns to), and whether the rule's end.
    struct Reach {
        std::vector<std::int32_t> reads;
        std::vector<std::pair<std::int32_t, std::int32_t>> calls;
        bool ends = false;
    };
    std::vector<Reach> reach_;
    mutable TokenSetCache tokens_;  ///< per set of stacks, the tokens it reads
};

/// The text so far read by a grammar: the stacks of every reading still alive. A small value:
/// copying it is how a candidate continuation is tried.
class GrammarPrefix {
public:
    explicit GrammarPrefix(const Grammar& g);
    bool feed(std::string_view text);
    /// The text is a whole match and nothing may follow.
    bool complete() const;
    /// The text is a whole match (EOS allowed).
    bool can_end() const;
    std::int64_t string_room() const { return -1; }
    AutomatonAt automaton() const { return {}; }
    /// The tokens whose whole text this reads (a bit per token), from the grammar's cache (a walk
    /// of the vocabulary's trie the first time these stacks are asked about); nullptr past its budget.
    const std::uint64_t* tokens(const GuideVocabulary& vocab) const;

private:
    friend class Grammar;
    /// Adds to `out` (once each) the stacks reached from `depth` `returns` and `state` without
    /// reading (calls, returns, empty edges) that are at a state that reads bytes or at the root's
    /// end. Counts the stacks it visits into `steps`: false (out partial) past kMaxClosureSteps.
    bool close(const std::int32_t* returns, std::int32_t depth, std::int32_t state, std::vector<std::int32_t>& out,
               std::size_t& steps) const;

    /// Integers held in place up to a few stacks' worth (a copy, which the mask's walk makes at
    /// each node of the vocabulary's trie, then allocates nothing), on the heap beyond.
    class Words {
    public:
        const std::int32_t* data() const { return heap_.empty() ? inline_.data() : heap_.data(); }
        std::size_t size() const { return size_; }
        std::int32_t operator[](std::size_t i) const { return data()[i]; }
        void assign(const std::int32_t* from, std::size_t n) {
            if (n <= inline_.size()) std::copy(from, from + n, inline_.begin()), heap_.clear();
            else heap_.assign(from, from + n);
            size_ = n;
        }

    private:
        std::array<std::int32_t, 14> inline_{};
        std::vector<std::int32_t> heap_;
        std::size_t size_ = 0;
    };

    const Grammar* g_;
    /// Flat: for each stack, its depth d, d return states, then its state (-1: the root has ended).
    Words stacks_;
};

}  // namespace aqpim::serve
