// The pattern parser (regex_syntax.h): recursive descent over ECMAScript's grammar.

#include "serve/regex_syntax.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "serve/regex_dfa.h"

namespace aqpim::serve::regex {
namespace {

CodeRanges normalized(CodeRanges r) {
    std::sort(r.begin(), r.end());
    CodeRanges out;
    for (const auto& [a, b] : r) {
        if (!out.empty() && a <= out.back().second + 1) out.back().second = std::max(out.back().second, b);
        else out.emplace_back(a, b);
    }
    return out;
}

CodeRanges complement(const CodeRanges& r) {  // r normalized
    CodeRanges out;
    char32_t next = 0;
    for (const auto& [a, b] : r) {
        if (a > next) out.emplace_back(next, a - 1);
        next = b + 1;
    }
    if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
    return out;
}

const CodeRanges kDigits = {{'0', '9'}};
const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const CodeRanges kSpace = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const CodeRanges kLineTerminators = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};

class Parser {
public:
    Parser(std::string_view pattern, Tree& tree) : p_(pattern), t_(tree) {}

    int top(bool search) {
        std::vector<int> alternatives;
        for (;;) {
            bool from_start = false, to_end = false;
            int seq = sequence(&from_start, &to_end);
            if (search && (!from_start || !to_end)) {
                Node n{Node::Kind::sequence, {}, {}, 0, 0};
                if (!from_start) n.kids.push_back(any_text());
                n.kids.push_back(seq);
                if (!to_end) n.kids.push_back(any_text());
                seq = add(std::move(n));
            }
            alternatives.push_back(seq);
            if (peek() != '|') break;
            ++i_;
        }
        if (!at_end()) fail("unmatched ')'");
        return one_of(std::move(alternatives));
    }

private:
    bool at_end() const { return i_ >= p_.size(); }
    char peek() const { return at_end() ? '\0' : p_[i_]; }
    [[noreturn]] void fail(const std::string& message) const { fail_at(i_, message); }
    [[noreturn]] void fail_at(std::size_t at, const std::string& message) const { throw RegexError(at, message); }

    int add(Node n) {
        t_.nodes.push_back(std::move(n));
        return int(t_.nodes.size() - 1);
    }
    int chars(CodeRanges r) { return add({Node::Kind::chars, std::move(r), {}, 0, 0}); }
    int any_text() { return add({Node::Kind::repeat, {}, {chars({{0, kMaxCodePoint}})}, 0, -1}); }
    int one_of(std::vector<int> alternatives) {
        if (alternatives.size() == 1) return alternatives[0];
        return add({Node::Kind::alternatives, {}, std::move(alternatives), 0, 0});
    }

    /// Items up to '|', ')' or the end. `from_start` / `to_end` (top level only, else nullptr):
    /// the alternative is anchored by '^' / '$'.
    int sequence(bool* from_start, bool* to_end) {
        static const char* const kAnchors =
            "'^' and '$' are supported only at the start and the end of the pattern or of a top-level alternative";
        std::vector<int> items;
        if (peek() == '^') {
            if (!from_start) fail(kAnchors);
            *from_start = true;
            ++i_;
        }
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '^') fail(kAnchors);
            if (peek() == '$') {
                if (!to_end || (i_ + 1 < p_.size() && p_[i_ + 1] != '|')) fail(kAnchors);
                *to_end = true;
                ++i_;
                break;
            }
            items.push_back(quantified());
        }
        if (items.empty()) return add({});
        if (items.size() == 1) return items[0];
        return add({Node::Kind::sequence, {}, std::move(items), 0, 0});
    }

    int alternation() {  // inside a group
        std::vector<int> alternatives;
        for (;;) {
            alternatives.push_back(sequence(nullptr, nullptr));
            if (peek() != '|') break;
            ++i_;
        }
        return one_of(std::move(alternatives));
    }

    int count() {
        if (at_end() || peek() < '0' || peek() > '9') fail("expected a number in {n,m}");
        long v = 0;
        while (!at_end() && peek() >= '0' && peek() <= '9') {
            v = v * 10 + (peek() - '0');
            if (v > RegexDfa::kMaxRepeat) fail("a repetition count above " + std::to_string(RegexDfa::kMaxRepeat));
            ++i_;
        }
        return int(v);
    }

    int quantified() {
        const int operand = atom();
        int min = 0, max = 0;
        switch (peek()) {
            case '*': min = 0, max = -1, ++i_; break;
            case '+': min = 1, max = -1, ++i_; break;
            case '?': min = 0, max = 1, ++i_; break;
            case '{':
                ++i_;
                min = max = count();
                if (peek() == ',') {
                    ++i_;
                    max = peek() == '}' ? -1 : count();
                }
                if (peek() != '}') fail("expected '}' closing {n,m}");
                ++i_;
                if (max >= 0 && max < min) fail("{n,m} with m below n");
                break;
            default: return operand;
        }
        if (peek() == '?') ++i_;  // lazy: the same texts match
        if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') fail("nothing to repeat");
        return add({Node::Kind::repeat, {}, {operand}, min, max});
    }

    int atom() {
        switch (peek()) {
            case '(': return group();
            case '[': return chars(klass());
            case '.': ++i_; return chars(complement(kLineTerminators));
            case '\\': ++i_; return chars(escape(false));
            case '*': case '+': case '?': fail("nothing to repeat");
            case '{': fail("'{' must be escaped where it does not repeat");
            default: {
                const char32_t c = code_point();
                return chars({{c, c}});
            }
        }
    }

    int group() {
        const std::size_t open = i_++;
        if (p_.substr(i_, 2) == "?:") {
            i_ += 2;
        } else if (peek() == '?') {
            const std::string_view s = p_.substr(i_, 3);
            if (s.substr(0, 2) == "?=" || s.substr(0, 2) == "?!" || s == "?<=" || s == "?<!")
                fail_at(open, "lookaround is not supported");
            if (s.substr(0, 2) != "?<") fail_at(open, "unknown group syntax '(?'");
            i_ += 2;
            const std::size_t name = i_;
            while (!at_end() && peek() != '>') {
                const char c = peek();
                const bool first = i_ == name;
                if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || (!first && std::isdigit(static_cast<unsigned char>(c)))))
                    fail("a group name is a letter, '_' or '$', then those or digits");
                ++i_;
            }
            if (at_end()) fail("missing '>' after a group name");
            if (i_ == name) fail("an empty group name");
            ++i_;
        }
        if (++depth_ > kMaxGroupDepth) fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
        const int inner = alternation();
        --depth_;
        if (peek() != ')') fail("missing ')'");
        ++i_;
        return inner;
    }

    char32_t code_point() {
        const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(p_[k]); };
        const unsigned char b0 = byte(i_);
        const int n = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
        if (n == 0 || i_ + std::size_t(n) > p_.size()) fail("the pattern is not valid UTF-8");
        char32_t c = n == 1 ? b0 : n == 2 ? b0 & 0x1F : n == 3 ? b0 & 0x0F : b0 & 0x07;
        for (int k = 1; k < n; ++k) {
            if ((byte(i_ + std::size_t(k)) & 0xC0) != 0x80) fail("the pattern is not valid UTF-8");
            c = (c << 6) | (byte(i_ + std::size_t(k)) & 0x3F);
        }
        static const char32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (c < kLeast[n] || c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) fail("the pattern is not valid UTF-8");
        i_ += std::size_t(n);
        return c;
    }

    char32_t hex(int digits) {
        char32_t v = 0;
        for (int k = 0; k < digits; ++k) {
            const char c = peek();
            const int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (h < 0) fail("expected a hexadecimal digit");
            v = v * 16 + char32_t(h);
            ++i_;
        }
        return v;
    }

    /// After '\\': a class escape's set or one code point.
    CodeRanges escape(bool in_class) {
        const std::size_t backslash = i_ - 1;
        if (at_end()) fail_at(backslash, "the pattern ends with '\\'");
        const char c = p_[i_++];
        const auto one = [](char32_t v) { return CodeRanges{{v, v}}; };
        switch (c) {
            case 'd': return kDigits;
            case 'D': return complement(kDigits);
            case 'w': return kWord;
            case 'W': return complement(kWord);
            case 's': return kSpace;
            case 'S': return complement(kSpace);
            case 't': return one('\t');
            case 'n': return one('\n');
            case 'r': return one('\r');
            case 'f': return one('\f');
            case 'v': return one('\v');
            case '0':
                if (peek() >= '0' && peek() <= '9') fail_at(backslash, "octal escapes are not supported");
                return one(0);
            case 'x': return one(hex(2));
            case 'u': {
                if (peek() == '{') {
                    ++i_;
                    char32_t v = 0;
                    int digits = 0;
                    while (peek() != '}') {
                        v = v * 16 + hex(1);  // leading zeros are allowed: the value is bounded, not the digits
                        ++digits;
                        if (v > kMaxCodePoint) fail("\\u{...} beyond U+10FFFF");
                    }
                    if (digits == 0) fail("expected a hexadecimal digit");
                    ++i_;
                    return one(v);
                }
                char32_t v = hex(4);
                if (v >= 0xD800 && v <= 0xDBFF && p_.substr(i_, 2) == "\\u") {  // a surrogate pair: one code point
                    const std::size_t back = i_;
                    i_ += 2;
                    const char32_t low = hex(4);
                    if (low >= 0xDC00 && low <= 0xDFFF) return one(0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00));
                    i_ = back;
                }
                return one(v);  // a lone surrogate matches nothing UTF-8 can hold
            }
            case 'c': {
                const char l = peek();
                if (!std::isalpha(static_cast<unsigned char>(l))) fail_at(backslash, "\\c must be followed by a letter");
                ++i_;
                return one(char32_t(l) % 32);
            }
            case 'b':
                if (in_class) return one('\b');
                fail_at(backslash, "word boundaries (\\b, \\B) are not supported");
            case 'B': fail_at(backslash, "word boundaries (\\b, \\B) are not supported");
            case 'k': fail_at(backslash, "back-references are not supported");
            case 'p': case 'P': fail_at(backslash, "Unicode property escapes (\\p, \\P) are not supported");
            default: break;
        }
        if (c >= '1' && c <= '9') fail_at(backslash, "back-references are not supported");
        if (std::isalnum(static_cast<unsigned char>(c))) fail_at(backslash, std::string("unknown escape \\") + c);
        --i_;  // an escaped character stands for itself (it may take several bytes)
        return one(code_point());
    }

    /// One class member: a code point (true, in `single`) or an escape's set (false, in `set`).
    bool class_member(char32_t& single, CodeRanges& set) {
        if (peek() != '\\') {
            single = code_point();
            return true;
        }
        ++i_;
        const bool class_escape = std::string_view("dDwWsS").find(peek()) != std::string_view::npos;
        set = escape(true);
        if (class_escape) return false;
        single = set[0].first;
        return true;
    }

    CodeRanges klass() {
        ++i_;
        const bool negate = peek() == '^';
        if (negate) ++i_;
        CodeRanges r;
        while (peek() != ']') {
            if (at_end()) fail("missing ']'");
            char32_t lo = 0, hi = 0;
            CodeRanges set;
            if (!class_member(lo, set)) {
                r.insert(r.end(), set.begin(), set.end());
                continue;
            }
            if (peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
                ++i_;
                if (!class_member(hi, set)) fail("a class range ends in a set (\\d, \\w, \\s)");
                if (hi < lo) fail("a class range out of order");
                r.emplace_back(lo, hi);
            } else {
                r.emplace_back(lo, lo);
            }
        }
        ++i_;
        r = normalized(std::move(r));
        return negate ? complement(r) : r;
    }

    static constexpr int kMaxGroupDepth = 256;
    std::string_view p_;
    std::size_t i_ = 0;
    Tree& t_;
    int depth_ = 0;
};

}  // namespace

Tree parse(std::string_view pattern, bool search) {
    Tree tree;
    Parser parser(pattern, tree);
    tree.root = parser.top(search);
    return tree;
}

}  // namespace aqpim::serve::regex
