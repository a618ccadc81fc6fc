// GBNF grammars (grammar.h): the parser builds each rule's byte automaton as it reads (Thompson's
// construction; a repeated element is read again for each copy), then the rules that cannot finish
// and the states that cannot reach their rule's end are cut, and left recursion is refused, so
// that the recognizer's closure ends and every stack it holds can still reach a match.

#include "serve/grammar.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "serve/utf8_ranges.h"

namespace aqpim::serve {

using Edge = Grammar::Edge;

/// The parser and builder: reads `src` at `pos`, adds states and edges to `g`.
struct GrammarBuilder {
    struct Fragment {
        std::int32_t start, end;
    };

    Grammar& g;
    std::string_view src;
    std::size_t pos = 0;
    std::map<std::string, std::int32_t, std::less<>> ids;
    std::vector<std::size_t> first_use;  ///< [rule] where it was first called (kUnused: never)
    std::vector<bool> defined;
    std::int32_t rule = -1;              ///< the rule being read
    int nesting = 0;                     ///< groups open at pos
    std::size_t reread = 0;              ///< bytes read again for the copies of repeated elements

    [[noreturn]] void fail(std::size_t at, const std::string& what) const {
        std::size_t line = 1, column = 1;
        for (std::size_t i = 0; i < at && i < src.size(); ++i) {
            if (src[i] == '\n') ++line, column = 1;
            else if ((static_cast<unsigned char>(src[i]) & 0xC0) != 0x80) ++column;
        }
        throw GrammarError(fmt::format("at line {}, column {}: {}", line, column, what));
    }

    std::int32_t state() {
        if (g.n_states() >= Grammar::kMaxStates)
            fail(pos, fmt::format("the grammar needs more than {} automaton states (fewer or smaller repetitions)", Grammar::kMaxStates));
        g.edges_.emplace_back();
        g.rule_of_.push_back(rule);
        return std::int32_t(g.edges_.size()) - 1;
    }
    void edge(std::int32_t from, Edge e) { g.edges_[std::size_t(from)].push_back(e); }
    void empty(std::int32_t from, std::int32_t to) { edge(from, {to, Grammar::kEmpty}); }
    Fragment nothing() {
        const std::int32_t s = state();
        return {s, s};
    }
    Fragment then(Fragment a, Fragment b) {
        empty(a.end, b.start);
        return {a.start, b.end};
    }

    static constexpr std::size_t kUnused = std::size_t(-1);

    std::int32_t rule_id(std::string_view name) {
        const auto it = ids.find(name);
        if (it != ids.end()) return it->second;
        const std::int32_t id = std::int32_t(g.rule_start_.size());
        ids.emplace(std::string(name), id);
        g.rule_names_.emplace_back(name);
        g.rule_start_.push_back(-1);
        g.rule_end_.push_back(-1);
        first_use.push_back(kUnused);
        defined.push_back(false);
        return id;
    }

    bool at_end() const { return pos >= src.size(); }
    char peek() const { return at_end() ? '\0' : src[pos]; }
    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    /// Spaces, tabs and comments; newlines too where `newline_ok`.
    void space(bool newline_ok) {
        while (!at_end()) {
            const char c = src[pos];
            if (c == ' ' || c == '\t') ++pos;
            else if (c == '#') while (!at_end() && src[pos] != '\n' && src[pos] != '\r') ++pos;
            else if (newline_ok && (c == '\n' || c == '\r')) ++pos;
            else break;
        }
    }

    std::string_view name() {
        const std::size_t from = pos;
        while (!at_end() && name_char(src[pos])) ++pos;
        if (pos == from) fail(pos, "expected a rule name");
        return src.substr(from, pos - from);
    }

    std::uint32_t hex(int digits) {
        std::uint32_t v = 0;
        for (int i = 0; i < digits; ++i, ++pos) {
            const char c = peek();
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) fail(pos, fmt::format("expected {} hex digits", digits));
            v = v * 16 + std::uint32_t(d);
        }
        return v;
    }

    /// One character of a literal or class: UTF-8 as written, or an escape.
    char32_t character() {
        const std::size_t at = pos;
        if (at_end()) fail(pos, "unexpected end of the grammar");
        const unsigned char c = static_cast<unsigned char>(src[pos++]);
        char32_t cp = 0;
        if (c == '\\') {
            if (at_end()) fail(at, "an escape at the end of the grammar");
            const char e = src[pos++];
            switch (e) {
                case 'x': cp = hex(2); break;
                case 'u': cp = hex(4); break;
                case 'U': cp = hex(8); break;
                case 't': cp = '\t'; break;
                case 'r': cp = '\r'; break;
                case 'n': cp = '\n'; break;
                case '\\': case '"': case '[': case ']': case '-': case '^': cp = char32_t(e); break;
                default: fail(at, fmt::format("unknown escape '\\{}'", e));
            }
        } else if (c < 0x80) {
            cp = c;
        } else {
            const int n = c >= 0xF0 && c < 0xF8 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
            if (n < 0 || c >= 0xF8) fail(at, "invalid UTF-8");
            cp = c & (0x3F >> n);
            for (int i = 0; i < n; ++i) {
                if (at_end() || (static_cast<unsigned char>(src[pos]) & 0xC0) != 0x80) fail(at, "invalid UTF-8");
                cp = (cp << 6) | (static_cast<unsigned char>(src[pos++]) & 0x3F);
            }
            if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) fail(at, "invalid UTF-8 (an overlong form)");
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(at, fmt::format("U+{:04X} is not a character", std::uint32_t(cp)));
        return cp;
    }

    /// A chain reading one of `ranges`' code points.
    Fragment chars(std::vector<std::pair<char32_t, char32_t>> ranges) {
        std::sort(ranges.begin(), ranges.end());
        std::vector<ByteRanges> seqs;
        for (const auto& [lo, hi] : ranges) utf8_sequences(lo, hi, seqs);
        const Fragment f{state(), state()};
        for (const ByteRanges& seq : seqs) {
            std::int32_t at = f.start;
            for (std::size_t i = 0; i < seq.size(); ++i) {
                const std::int32_t to = i + 1 == seq.size() ? f.end : state();
                edge(at, {to, Grammar::kBytes, seq[i].first, seq[i].second});
                at = to;
            }
        }
        return f;
    }

    Fragment literal() {
        ++pos;  // "
        Fragment f = nothing();
        while (peek() != '"') {
            if (at_end()) fail(pos, "a literal without its closing '\"'");
            const char32_t c = character();
            f = then(f, chars({{c, c}}));
        }
        ++pos;
        return f;
    }

    Fragment char_class() {
        const std::size_t at = pos++;  // [
        const bool negated = peek() == '^';
        if (negated) ++pos;
        std::vector<std::pair<char32_t, char32_t>> ranges;
        while (peek() != ']') {
            if (at_end()) fail(at, "a class without its closing ']'");
            const char32_t lo = character();
            char32_t hi = lo;
            if (peek() == '-' && pos + 1 < src.size() && src[pos + 1] != ']') {
                ++pos;
                hi = character();
                if (hi < lo) fail(at, "a class range whose end is below its start");
            }
            ranges.emplace_back(lo, hi);
        }
        ++pos;
        if (!negated) return chars(std::move(ranges));
        std::sort(ranges.begin(), ranges.end());
        std::vector<std::pair<char32_t, char32_t>> rest;
        char32_t next = 0;
        for (const auto& [lo, hi] : ranges) {
            if (lo > next) rest.emplace_back(next, lo - 1);
            next = std::max(next, char32_t(hi + 1));
        }
        if (next <= 0x10FFFF) rest.emplace_back(next, 0x10FFFF);
        if (rest.empty()) fail(at, "a negated class that leaves no character");
        return chars(std::move(rest));
    }

    /// A literal, class, `.`, group or rule name.
    Fragment primary() {
        const char c = peek();
        if (c == '"') return literal();
        if (c == '[') return char_class();
        if (c == '.') {
            ++pos;
            return chars({{0, 0x10FFFF}});
        }
        if (c == '(') {
            if (++nesting > Grammar::kMaxNesting) fail(pos, fmt::format("groups nested deeper than {}", Grammar::kMaxNesting));
            ++pos;
            space(true);
            const Fragment f = alternatives(true);
            if (peek() != ')') fail(pos, "expected ')'");
            ++pos;
            --nesting;
            return f;
        }
        if (c == '<') fail(pos, "token references (<...>) are not supported");
        if (!name_char(c)) fail(pos, at_end() ? "unexpected end of the grammar" : fmt::format("unexpected '{}'", c));
        const std::size_t at = pos;
        const std::int32_t callee = rule_id(name());
        if (first_use[std::size_t(callee)] == kUnused) first_use[std::size_t(callee)] = at;
        const Fragment f{state(), state()};
        edge(f.start, {f.end, callee});
        return f;
    }

    int number() {
        const std::size_t at = pos;
        long v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + (peek() - '0');
            if (v > Grammar::kMaxRepeat) fail(at, fmt::format("a repetition bound above {}", Grammar::kMaxRepeat));
            ++pos;
        }
        if (pos == at) fail(at, "expected a number");
        return int(v);
    }

    /// An element and its repetition operator, if any. Each further copy of a repeated element
    /// is the element read again from `from`.
    Fragment element(bool nested) {
        const std::size_t from = pos;
        Fragment first = primary();
        const std::size_t after = pos;
        space(nested);
        const char op = peek();
        if (op != '*' && op != '+' && op != '?' && op != '{') {
            pos = after;
            return first;
        }
        bool used_first = false;
        auto copy = [&] {
            if (!used_first) {
                used_first = true;
                return first;
            }
            reread += after - from;  // a copy is the element read again: bound the bytes so read
            if (reread > Grammar::kMaxReach) fail(from, fmt::format("repetitions that read more than {} bytes of the grammar again", Grammar::kMaxReach));
            const std::size_t save = pos;
            pos = from;
            const Fragment f = primary();
            pos = save;
            return f;
        };
        int min = 0, max = -1;  // -1: unbounded
        if (op == '{') {
            const std::size_t at = pos++;
            space(false);
            if (peek() != ',') min = number();
            space(false);
            if (peek() == ',') {
                ++pos;
                space(false);
                if (peek() != '}') max = number();
            } else {
                max = min;
            }
            space(false);
            if (peek() != '}') fail(pos, "expected '}'");
            ++pos;
            if (max >= 0 && max < min) fail(at, fmt::format("a repetition {{{},{}}} whose most is below its least", min, max));
        } else {
            ++pos;
            min = op == '+' ? 1 : 0;
            max = op == '?' ? 1 : -1;
        }
        Fragment f = nothing();
        for (int i = 0; i < min; ++i) f = then(f, copy());
        if (max < 0) {  // then any number more: a loop
            const Fragment x = copy();
            const std::int32_t loop = state();
            empty(f.end, loop);
            empty(loop, x.start);
            empty(x.end, loop);
            return {f.start, loop};
        }
        const std::int32_t end = state();
        std::int32_t at = f.end;
        for (int i = min; i < max; ++i) {
            const Fragment x = copy();
            empty(at, x.start);
            empty(at, end);
            at = x.end;
        }
        empty(at, end);
        return {f.start, end};
    }

    Fragment sequence(bool nested) {
        Fragment f = nothing();
        for (;;) {
            space(nested);
            const char c = peek();
            if (at_end() || c == '|' || c == ')' || c == '\n' || c == '\r') return f;
            f = then(f, element(nested));
        }
    }

    Fragment alternatives(bool nested) {
        Fragment first = sequence(nested);
        if (peek() != '|') return first;
        const Fragment f{state(), state()};
        empty(f.start, first.start);
        empty(first.end, f.end);
        while (peek() == '|') {
            ++pos;
            space(true);
            const Fragment alt = sequence(nested);
            empty(f.start, alt.start);
            empty(alt.end, f.end);
        }
        return f;
    }

    void rule_definition() {
        const std::size_t at = pos;
        const std::string_view n = name();
        rule = rule_id(n);
        if (defined[std::size_t(rule)]) fail(at, fmt::format("rule '{}' is defined twice", n));
        defined[std::size_t(rule)] = true;
        space(false);
        if (src.substr(pos, 3) != "::=") fail(pos, fmt::format("expected '::=' after '{}'", n));
        pos += 3;
        space(true);
        const Fragment body = alternatives(false);
        g.rule_start_[std::size_t(rule)] = body.start;
        g.rule_end_[std::size_t(rule)] = state();
        empty(body.end, g.rule_end_[std::size_t(rule)]);
        if (!at_end() && peek() != '\n' && peek() != '\r') fail(pos, fmt::format("expected a new line after rule '{}'", n));
        space(true);
    }

    void parse() {
        if (src.size() > Grammar::kMaxSourceBytes) fail(0, fmt::format("the grammar is over {} bytes", Grammar::kMaxSourceBytes));
        space(true);
        while (!at_end()) rule_definition();
        for (std::size_t r = 0; r < defined.size(); ++r)
            if (!defined[r]) fail(first_use[r], fmt::format("rule '{}' is used but not defined", g.rule_names_[r]));
        const auto root = ids.find("root");
        if (root == ids.end()) fail(src.size(), "no rule named 'root' (the whole text)");
        g.root_ = root->second;
    }
};

namespace {

/// Whether each rule can finish: its end reachable from its start through byte edges (where
/// `bytes`), empty edges, and calls of rules that can finish. One pass over the states: a call of
/// a rule not known to finish waits on it, and goes on when that rule's end is reached.
std::vector<bool> rules_that_finish(const std::vector<std::vector<Edge>>& edges, const std::vector<std::int32_t>& rule_of,
                                    const std::vector<std::int32_t>& start, const std::vector<std::int32_t>& end, bool bytes) {
    std::vector<bool> done(start.size(), false), seen(edges.size(), false);
    std::vector<std::vector<std::int32_t>> waiting(start.size());  // [rule] the states its calls return to
    std::vector<std::int32_t> todo(start.begin(), start.end());
    while (!todo.empty()) {
        const std::int32_t s = todo.back();
        todo.pop_back();
        if (seen[std::size_t(s)]) continue;
        seen[std::size_t(s)] = true;
        const std::size_t r = std::size_t(rule_of[std::size_t(s)]);
        if (s == end[r] && !done[r]) {
            done[r] = true;
            todo.insert(todo.end(), waiting[r].begin(), waiting[r].end());
            waiting[r].clear();
        }
        for (const Edge& e : edges[std::size_t(s)]) {
            if (e.call == Grammar::kEmpty || (e.call == Grammar::kBytes && bytes) || (e.call >= 0 && done[std::size_t(e.call)]))
                todo.push_back(e.to);
            else if (e.call >= 0)
                waiting[std::size_t(e.call)].push_back(e.to);
        }
    }
    return done;
}

}  // namespace

Grammar::Grammar(std::string_view source) {
    GrammarBuilder b{*this, source, 0, {}, {}, {}, -1, 0, 0};
    b.parse();
    const std::size_t n = edges_.size();
    // Rules that can finish at all; then drop calls of the others and the states from which
    // their rule's end cannot be reached, so no stack the recognizer holds is a dead end.
    const std::vector<bool> finishes = rules_that_finish(edges_, rule_of_, rule_start_, rule_end_, true);
    if (!finishes[std::size_t(root_)]) b.fail(0, "the grammar matches no text: rule 'root' can never finish");
    std::vector<std::vector<std::int32_t>> from(n);  // reversed edges that stay
    for (std::size_t s = 0; s < n; ++s)
        for (const Edge& e : edges_[s])
            if (e.call < 0 || finishes[std::size_t(e.call)]) from[std::size_t(e.to)].push_back(std::int32_t(s));
    std::vector<bool> live(n, false);
    std::vector<std::int32_t> todo(rule_end_.begin(), rule_end_.end());
    for (const std::int32_t s : todo) live[std::size_t(s)] = true;
    while (!todo.empty()) {
        const std::int32_t s = todo.back();
        todo.pop_back();
        for (const std::int32_t p : from[std::size_t(s)])
            if (!live[std::size_t(p)]) live[std::size_t(p)] = true, todo.push_back(p);
    }
    for (std::vector<Edge>& out : edges_)
        std::erase_if(out, [&](const Edge& e) { return !live[std::size_t(e.to)] || (e.call >= 0 && !finishes[std::size_t(e.call)]); });
    // Left recursion: a rule that can call itself before reading a byte would make the closure
    // endless. Each rule's calls reachable from its start through empty edges and calls of rules
    // that can finish empty; a cycle among them is refused.
    const std::vector<bool> empty_ok = rules_that_finish(edges_, rule_of_, rule_start_, rule_end_, false);
    const std::size_t n_rules = rule_start_.size();
    std::vector<std::vector<std::int32_t>> first_calls(n_rules);
    for (std::size_t r = 0; r < n_rules; ++r) {
        std::vector<std::int32_t> stack = {rule_start_[r]};
        std::vector<bool> seen(n, false);
        seen[std::size_t(rule_start_[r])] = true;
        while (!stack.empty()) {
            const std::int32_t s = stack.back();
            stack.pop_back();
            for (const Edge& e : edges_[std::size_t(s)]) {
                if (e.call >= 0) first_calls[r].push_back(e.call);
                const bool passes = e.call == kEmpty || (e.call >= 0 && empty_ok[std::size_t(e.call)]);
                if (passes && !seen[std::size_t(e.to)]) seen[std::size_t(e.to)] = true, stack.push_back(e.to);
            }
        }
    }
    std::vector<int> mark(n_rules, 0);  // 0 unvisited, 1 on the path, 2 done
    for (std::size_t r0 = 0; r0 < n_rules; ++r0) {
        if (mark[r0]) continue;
        std::vector<std::pair<std::int32_t, std::size_t>> path = {{std::int32_t(r0), 0}};
        mark[r0] = 1;
        while (!path.empty()) {
            auto& [r, i] = path.back();
            if (i == first_calls[std::size_t(r)].size()) {
                mark[std::size_t(r)] = 2;
                path.pop_back();
                continue;
            }
            const std::int32_t q = first_calls[std::size_t(r)][i++];
            if (mark[std::size_t(q)] == 1)
                b.fail(b.first_use[std::size_t(q)], fmt::format("rule '{}' is left-recursive (it can call itself before reading a character)",
                                                                rule_names_[std::size_t(q)]));
            if (mark[std::size_t(q)] == 0) mark[std::size_t(q)] = 1, path.emplace_back(q, 0);
        }
    }
    // Each state's empty paths, once, for the recognizer's closure.
    reach_.resize(n);
    std::size_t work = 0;
    std::vector<std::int32_t> seen_at(n, -1), stack;
    for (std::size_t s0 = 0; s0 < n; ++s0) {
        Reach& r = reach_[s0];
        stack = {std::int32_t(s0)};
        seen_at[s0] = std::int32_t(s0);
        while (!stack.empty()) {
            if (++work > kMaxReach)
                b.fail(0, fmt::format("the grammar's empty paths take more than {} steps to follow (fewer optional elements in a row)", kMaxReach));
            const std::int32_t s = stack.back();
            stack.pop_back();
            bool reads = false;
            for (const Edge& e : edges_[std::size_t(s)]) {
                if (e.call == kBytes) reads = true;
                else if (e.call >= 0) r.calls.emplace_back(e.call, e.to);
                else if (seen_at[std::size_t(e.to)] != std::int32_t(s0)) seen_at[std::size_t(e.to)] = std::int32_t(s0), stack.push_back(e.to);
            }
            if (reads) r.reads.push_back(s);
            r.ends = r.ends || s == rule_end_[std::size_t(rule_of_[std::size_t(s)])];
        }
    }
    // Every closure the recognizer can start (from the root's start, after a byte, on a return)
    // within the bounds, followed once here: a grammar whose empty paths fan out (a chain of
    // hundreds of rules that read nothing, rules that call two nullable rules each, a run of
    // optional elements) is refused now, not met at each byte of each request. Beyond these, each
    // byte's closures together are bounded again (kMaxClosureSteps): a byte past that is not read.
    GrammarPrefix probe(*this);
    std::vector<std::int32_t> out;
    std::size_t total = 0;
    auto bounded = [&](std::int32_t s) {
        out.clear();
        std::size_t steps = 0;
        const bool ok = probe.close(nullptr, 0, s, out, steps);
        total += steps;
        std::size_t stacks = 0;
        for (std::size_t i = 0; i < out.size(); i += std::size_t(out[i]) + 2) ++stacks;
        return ok && stacks <= std::size_t(kMaxStacks) && out.size() <= kMaxStackWords;
    };
    if (!bounded(rule_start_[std::size_t(root_)]))
        b.fail(0, fmt::format("the grammar's start holds more than {} readings or {} rule calls before its first character",
                              kMaxStacks, kMaxClosureSteps));
    for (std::size_t s = 0; s < n; ++s)
        for (const Edge& e : edges_[s]) {
            if (e.call != kEmpty && !bounded(e.to))
                b.fail(0, fmt::format("rule '{}': after a character or a call it reaches more than {} readings or {} rule calls and "
                                      "returns before the next character",
                                      rule_names_[std::size_t(rule_of_[s])], kMaxStacks, kMaxClosureSteps));
            if (total > kMaxReach)
                b.fail(0, fmt::format("the grammar's empty paths take more than {} steps to follow", kMaxReach));
        }
}

GrammarPrefix::GrammarPrefix(const Grammar& g) : g_(&g) {
    std::vector<std::int32_t> start;
    std::size_t steps = 0;
    close(nullptr, 0, g.rule_start_[std::size_t(g.root_)], start, steps);  // within the bounds: checked when g was built
    stacks_.assign(start.data(), start.size());
}

namespace {

/// Whether the stack at `stack`[0..n) (flat: depth, returns, state) is in `set`.
bool holds(const std::vector<std::int32_t>& set, const std::int32_t* stack, std::size_t n) {
    for (std::size_t i = 0; i < set.size(); i += std::size_t(set[i]) + 2) {
        if (std::size_t(set[i]) + 2 != n || set[i + n - 1] != stack[n - 1]) continue;  // the state first: most differ there
        std::size_t k = 1;
        while (k + 1 < n && set[i + k] == stack[k]) ++k;
        if (k + 1 >= n) return true;
    }
    return false;
}

}  // namespace

bool GrammarPrefix::close(const std::int32_t* returns, std::int32_t depth, std::int32_t state, std::vector<std::int32_t>& out,
                          std::size_t& steps) const {
    // Depth first over stacks not seen in this closure, each flat as in stacks_ (the scratch
    // vectors are the thread's: a closure allocates nothing once they have grown).
    thread_local std::vector<std::int32_t> todo, seen, stack;
    todo.clear();
    seen.clear();
    todo.push_back(depth);
    todo.insert(todo.end(), returns, returns + depth);
    todo.push_back(state);
    todo.push_back(depth + 2);  // each entry ends with its length, so the last one can be popped
    while (!todo.empty()) {
        if (++steps > Grammar::kMaxClosureSteps) return false;
        const std::size_t n = std::size_t(todo.back());
        stack.assign(todo.end() - std::ptrdiff_t(n) - 1, todo.end() - 1);
        todo.resize(todo.size() - n - 1);
        if (holds(seen, stack.data(), n)) continue;
        seen.insert(seen.end(), stack.begin(), stack.end());
        const std::int32_t d = stack[0], s = stack[n - 1];
        if (s < 0) {  // the root has ended
            if (!holds(out, stack.data(), n)) out.insert(out.end(), stack.begin(), stack.end());
            continue;
        }
        auto push = [&](std::int32_t new_depth, std::size_t keep, std::int32_t a, std::int32_t b) {
            // A stack of `new_depth`: the first `keep` returns of this one, then `a`, then `b` when
            // one deeper than `keep` (a call: `a` the return, `b` the callee's start).
            todo.push_back(new_depth);
            todo.insert(todo.end(), stack.begin() + 1, stack.begin() + 1 + std::ptrdiff_t(keep));
            todo.push_back(a);
            if (new_depth > std::int32_t(keep)) todo.push_back(b);
            todo.push_back(new_depth + 2);
        };
        const Grammar::Reach& r = g_->reach_[std::size_t(s)];
        for (const std::int32_t t : r.reads) {
            stack[n - 1] = t;
            if (!holds(out, stack.data(), n)) out.insert(out.end(), stack.begin(), stack.end());
        }
        stack[n - 1] = s;
        for (const auto& [callee, ret] : r.calls) {
            const Grammar::Reach& after = g_->reach_[std::size_t(ret)];
            if (after.ends && after.reads.empty() && after.calls.empty())
                push(d, std::size_t(d), g_->rule_start_[std::size_t(callee)], 0);  // a tail call: it returns where this rule would
            else if (d < Grammar::kMaxDepth)
                push(d + 1, std::size_t(d), ret, g_->rule_start_[std::size_t(callee)]);  // deeper calls are not taken
        }
        if (r.ends) {  // the rule returns
            if (d == 0) push(0, 0, -1, 0);
            else push(d - 1, std::size_t(d) - 1, stack[std::size_t(d)], 0);
        }
    }
    return true;
}

bool GrammarPrefix::feed(std::string_view text) {
    thread_local std::vector<std::int32_t> next, stack;
    for (const char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        next.clear();
        std::size_t steps = 0;  // the closures' work for this byte, all stacks together
        for (std::size_t i = 0; i < stacks_.size(); i += std::size_t(stacks_[i]) + 2) {
            const std::int32_t depth = stacks_[i], s = stacks_[i + std::size_t(depth) + 1];
            if (s < 0) continue;
            for (const Edge& e : g_->edges_[std::size_t(s)]) {
                if (e.call != Grammar::kBytes || e.lo > c || c > e.hi) continue;
                const Grammar::Reach& r = g_->reach_[std::size_t(e.to)];
                if (!r.calls.empty() || r.ends) {
                    if (!close(stacks_.data() + i + 1, depth, e.to, next, steps)) return false;
                    continue;
                }
                // Within the rule (most bytes): this stack at each state its empty paths reach that reads.
                const std::size_t n = std::size_t(depth) + 2;
                stack.assign(stacks_.data() + i, stacks_.data() + i + n);
                for (const std::int32_t t : r.reads) {
                    stack[n - 1] = t;
                    if (!holds(next, stack.data(), n)) next.insert(next.end(), stack.begin(), stack.end());
                }
            }
        }
        std::size_t count = 0;
        for (std::size_t i = 0; i < next.size(); i += std::size_t(next[i]) + 2) ++count;
        if (count == 0 || count > std::size_t(Grammar::kMaxStacks) || next.size() > Grammar::kMaxStackWords) return false;
        stacks_.assign(next.data(), next.size());
    }
    return true;
}

const std::uint64_t* GrammarPrefix::tokens(const GuideVocabulary& vocab) const {
    const std::string_view key(reinterpret_cast<const char*>(stacks_.data()), stacks_.size() * sizeof(std::int32_t));
    return g_->tokens_.tokens(key, vocab, [&](std::uint64_t* bits) {
        std::vector<std::pair<std::int32_t, GrammarPrefix>> stack;
        vocab.walk(
            *this,
            [](GrammarPrefix& p, unsigned char b) {
                const char c = char(b);
                return p.feed(std::string_view(&c, 1));
            },
            [&](std::int32_t t) { bits[std::size_t(t) / 64] |= std::uint64_t(1) << (t % 64); }, stack);
    });
}

bool GrammarPrefix::can_end() const {
    for (std::size_t i = 0; i < stacks_.size(); i += std::size_t(stacks_[i]) + 2)
        if (stacks_[i + std::size_t(stacks_[i]) + 1] < 0) return true;
    return false;
}

bool GrammarPrefix::complete() const { return stacks_.size() == 2 && stacks_[1] < 0; }

}  // namespace aqpim::serve
