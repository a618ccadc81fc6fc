// Patterns into byte automata (regex_dfa.h): the parsed tree into a Thompson NFA whose edges are
// byte ranges (each code-point set written as the UTF-8 sequences that encode it), then the subset
// construction over classes of bytes no edge tells apart, then the states from which no writable
// text reaches a match are cut.

#include "serve/regex_dfa.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <unordered_map>
#include <utility>

#include "serve/regex_syntax.h"
#include "serve/utf8_ranges.h"

namespace aqpim::serve {
namespace {

using regex::CodeRanges;
class Nfa {
public:
    struct Edge {
        unsigned char lo, hi;
        int to;
    };
    struct State {
        std::vector<int> eps;
        std::vector<Edge> edges;
    };
    struct Fragment {
        int in, out;
    };

    /// `spend(n)` is charged a step per state and per edge (it throws past the budget).
    Nfa(const regex::Tree& tree, const std::function<void(std::uint64_t)>& spend) : tree_(tree), spend_(spend) {
        const Fragment f = build(tree.root);
        start_ = f.in;
        final_ = f.out;
    }
    const std::vector<State>& states() const { return states_; }
    int start() const { return start_; }
    int final_state() const { return final_; }

private:
    int add() {
        if (states_.size() >= RegexDfa::kMaxNfaStates)
            throw RegexError(RegexError::kNoOffset, "the pattern needs more than " + std::to_string(RegexDfa::kMaxNfaStates) +
                                                        " automaton states (a repetition copies what it repeats)");
        spend_(1);
        states_.emplace_back();
        return int(states_.size() - 1);
    }
    void eps(int from, int to) { states_[std::size_t(from)].eps.push_back(to); }

    Fragment build(int index) {
        const regex::Node& n = tree_.nodes[std::size_t(index)];
        switch (n.kind) {
            case regex::Node::Kind::empty: {
                const int s = add();
                return {s, s};
            }
            case regex::Node::Kind::chars: {
                const int in = add(), out = add();
                auto [it, added] = sequences_.try_emplace(index);  // once per node, however often it is copied
                if (added)
                    for (const auto& [lo, hi] : n.chars) utf8_sequences(lo, hi, it->second);
                for (const ByteRanges& seq : it->second) {
                    int at = in;
                    for (std::size_t k = 0; k < seq.size(); ++k) {
                        const int to = k + 1 == seq.size() ? out : add();
                        spend_(1);
                        states_[std::size_t(at)].edges.push_back({seq[k].first, seq[k].second, to});
                        at = to;
                    }
                }
                return {in, out};
            }
            case regex::Node::Kind::sequence: {
                Fragment f = build(n.kids[0]);
                for (std::size_t k = 1; k < n.kids.size(); ++k) {
                    const Fragment g = build(n.kids[k]);
                    eps(f.out, g.in);
                    f.out = g.out;
                }
                return f;
            }
            case regex::Node::Kind::alternatives: {
                const int in = add(), out = add();
                for (const int kid : n.kids) {
                    const Fragment g = build(kid);
                    eps(in, g.in);
                    eps(g.out, out);
                }
                return {in, out};
            }
            case regex::Node::Kind::repeat: break;
        }
        const int in = add();
        int at = in;
        for (int k = 0; k < n.min; ++k) {
            const Fragment g = build(n.kids[0]);
            eps(at, g.in);
            at = g.out;
        }
        if (n.max < 0) {  // a loop
            const int loop = add();
            const Fragment g = build(n.kids[0]);
            eps(at, loop);
            eps(loop, g.in);
            eps(g.out, loop);
            return {in, loop};
        }
        const int out = add();
        for (int k = n.min; k < n.max; ++k) {
            eps(at, out);
            const Fragment g = build(n.kids[0]);
            eps(at, g.in);
            at = g.out;
        }
        eps(at, out);
        return {in, out};
    }

    const regex::Tree& tree_;
    const std::function<void(std::uint64_t)>& spend_;
    std::unordered_map<int, std::vector<ByteRanges>> sequences_;  ///< [chars node] its UTF-8 byte-range sequences
    std::vector<State> states_;
    int start_ = 0, final_ = 0;
};

}  // namespace

RegexError::RegexError(std::size_t offset, const std::string& message)
    : std::runtime_error(offset == kNoOffset ? message : "at byte " + std::to_string(offset) + " of the pattern: " + message) {}

RegexDfa::RegexDfa(RegexDfa&&) noexcept = default;
RegexDfa::~RegexDfa() = default;

RegexDfa::RegexDfa(std::string_view pattern, Match match, const std::bitset<256>& writable, std::uint64_t max_work)
    : token_cache_(std::make_unique<TokenSetCache>()) {
    if (pattern.size() > kMaxPatternBytes)
        throw RegexError(RegexError::kNoOffset, "the pattern is longer than " + std::to_string(kMaxPatternBytes) + " bytes");
    const std::function<void(std::uint64_t)> spend = [&](std::uint64_t steps) {
        work_ += steps;
        if (work_ > max_work)
            throw RegexError(RegexError::kNoOffset, "the pattern is too complex to compile (its automaton grows too large)");
    };
    const regex::Tree tree = regex::parse(pattern, match == Match::search);
    const Nfa nfa(tree, spend);
    const auto& states = nfa.states();

    // Byte classes: a new class wherever an edge's range or the writable set begins or ends.
    std::vector<bool> cut(257, false);
    cut[0] = true;
    for (const Nfa::State& s : states)
        for (const Nfa::Edge& e : s.edges) cut[e.lo] = true, cut[std::size_t(e.hi) + 1] = true;
    for (int b = 1; b < 256; ++b)
        if (writable[std::size_t(b)] != writable[std::size_t(b) - 1]) cut[std::size_t(b)] = true;
    int cls = -1;
    std::vector<bool> writable_class;
    for (int b = 0; b < 256; ++b) {
        if (cut[std::size_t(b)]) ++cls, writable_class.push_back(writable[std::size_t(b)]);
        class_of_[b] = static_cast<unsigned char>(cls);
    }
    n_classes_ = std::size_t(cls) + 1;

    std::vector<std::uint32_t> stamp(states.size(), 0);
    std::uint32_t stamp_now = 0;
    std::vector<int> stack;
    const auto closure = [&](const std::vector<int>& seeds) {
        ++stamp_now;
        std::vector<int> set;
        stack.assign(seeds.begin(), seeds.end());
        while (!stack.empty()) {
            const int s = stack.back();
            stack.pop_back();
            if (stamp[std::size_t(s)] == stamp_now) continue;
            stamp[std::size_t(s)] = stamp_now;
            set.push_back(s);
            for (const int t : states[std::size_t(s)].eps) stack.push_back(t);
        }
        // The walk, then the sort: S log2 S comparisons (counted so that the budget bounds the time
        // a pattern whose states are large sets takes: a fuzzer's 199-byte one spent 107 ms here).
        spend(seeds.size() + set.size() * std::uint64_t(1 + std::bit_width(set.size())));
        std::sort(set.begin(), set.end());
        return set;
    };

    struct SetHash {
        std::size_t operator()(const std::vector<int>& v) const {
            std::size_t h = v.size();
            for (const int x : v) h = (h ^ std::size_t(x)) * 0x100000001b3ULL;
            return h;
        }
    };
    std::unordered_map<std::vector<int>, std::int32_t, SetHash> ids;
    std::vector<const std::vector<int>*> sets;
    const auto id_of = [&](std::vector<int> set) {
        spend(set.size());  // hashed and compared once
        const auto [it, added] = ids.emplace(std::move(set), std::int32_t(sets.size()));
        if (added) {
            if (sets.size() >= kMaxStates)
                throw RegexError(RegexError::kNoOffset, "the pattern needs more than " + std::to_string(kMaxStates) + " automaton states");
            if ((sets.size() + 1) * n_classes_ * sizeof(std::int32_t) > kMaxTableBytes)
                throw RegexError(RegexError::kNoOffset, "the pattern's automaton needs more than " +
                                                            std::to_string(kMaxTableBytes >> 20) + " MiB");
            sets.push_back(&it->first);
            accepting_.push_back(std::binary_search(it->first.begin(), it->first.end(), nfa.final_state()));
        }
        return it->second;
    };
    start_ = id_of(closure({nfa.start()}));
    std::vector<std::vector<int>> moves(n_classes_);
    for (std::size_t d = 0; d < sets.size(); ++d) {
        for (auto& m : moves) m.clear();
        for (const int s : *sets[d])
            for (const Nfa::Edge& e : states[std::size_t(s)].edges) {
                spend(std::uint64_t(class_of_[e.hi] - class_of_[e.lo]) + 1);
                for (int c = class_of_[e.lo]; c <= class_of_[e.hi]; ++c) moves[std::size_t(c)].push_back(e.to);
            }
        for (std::size_t c = 0; c < n_classes_; ++c)
            table_.push_back(moves[c].empty() ? kDead : id_of(closure(moves[c])));
    }

    // Live states: those from which writable bytes reach a match (backwards from the matches).
    const std::size_t n = sets.size();
    std::vector<std::vector<std::int32_t>> into(n);
    for (std::size_t s = 0; s < n; ++s)
        for (std::size_t c = 0; c < n_classes_; ++c)
            if (const std::int32_t t = table_[s * n_classes_ + c]; t != kDead && writable_class[c]) into[std::size_t(t)].push_back(std::int32_t(s));
    std::vector<std::uint8_t> live(accepting_);
    std::vector<std::int32_t> todo;
    for (std::size_t s = 0; s < n; ++s)
        if (live[s]) todo.push_back(std::int32_t(s));
    while (!todo.empty()) {
        const std::int32_t t = todo.back();
        todo.pop_back();
        for (const std::int32_t s : into[std::size_t(t)])
            if (!live[std::size_t(s)]) live[std::size_t(s)] = 1, todo.push_back(s);
    }
    if (!live[std::size_t(start_)]) throw RegexError(RegexError::kNoOffset, "the pattern matches no text that can be written here");
    for (std::size_t s = 0; s < n; ++s) {
        bool leads_on = false;
        for (std::size_t c = 0; c < n_classes_; ++c) {
            std::int32_t& t = table_[s * n_classes_ + c];
            if (t != kDead && (!writable_class[c] || !live[std::size_t(t)])) t = kDead;
            leads_on = leads_on || t != kDead;
        }
        if (accepting_[s] && !leads_on) accepting_[s] |= 2;
    }
}

}  // namespace aqpim::serve
