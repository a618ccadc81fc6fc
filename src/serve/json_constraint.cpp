// JSON mode's recognizer and token mask (json_constraint.h).

#include "serve/json_constraint.h"

#include <algorithm>
#include <utility>

#include "serve/json_bytes.h"
#include "serve/grammar.h"
#include "serve/json_schema.h"
#include "serve/regex_dfa.h"

namespace aqpim::serve {

bool JsonPrefix::feed(std::string_view text) {
    for (const char ch : text)
        if (!byte(static_cast<unsigned char>(ch))) return false;
    return true;
}

bool JsonPrefix::open(bool object) {
    if (depth_ >= kMaxDepth) return false;
    if (object) objects_ |= std::uint64_t(1) << depth_;
    else objects_ &= ~(std::uint64_t(1) << depth_);
    ++depth_;
    mode_ = object ? Mode::key_or_end : Mode::value_or_end;
    return true;
}

bool JsonPrefix::close() {  // the caller's mode says the innermost container is of the bracket's kind
    --depth_;
    value_done();
    return true;
}

void JsonPrefix::value_done() {
    if (depth_ == 0) {
        mode_ = Mode::done;
        return;
    }
    mode_ = (objects_ >> (depth_ - 1)) & 1 ? Mode::next_in_object : Mode::next_in_array;
}

bool JsonPrefix::byte(unsigned char c) {
    switch (mode_) {
        case Mode::string:
            if (c == '"') {
                if (in_key_) {
                    in_key_ = false;
                    mode_ = Mode::colon;
                } else {
                    value_done();
                }
                return true;
            }
            if (c == '\\') mode_ = Mode::escape;
            return c >= 0x20;
        case Mode::escape:
            if (c == 'u') {
                mode_ = Mode::unicode;
                hex_left_ = 4;
                return true;
            }
            mode_ = Mode::string;
            return json_short_escape(c) >= 0;
        case Mode::unicode:
            if (json_hex_value(c) < 0) return false;
            if (--hex_left_ == 0) mode_ = Mode::string;
            return true;
        case Mode::literal:
            if (c != static_cast<unsigned char>(*literal_)) return false;
            if (*++literal_ == '\0') value_done();
            return true;
        case Mode::number:
            switch (json_number_step(number_, c)) {
                case NumberStep::taken: return true;
                case NumberStep::refused: return false;
                case NumberStep::ended: break;
            }
            value_done();  // the number ended: c is read after it
            return byte(c);
        default: break;
    }
    // Between tokens.
    if (json_space(c)) {
        if (c == '\r' || (c == '\n' && newline_)) return false;
        newline_ = newline_ || c == '\n';
        return ++whitespace_ <= kMaxWhitespace;
    }
    whitespace_ = 0;
    newline_ = false;
    switch (mode_) {
        case Mode::start:
            return c == '{' && open(true);
        case Mode::key_or_end:
            if (c == '}') return close();
            [[fallthrough]];
        case Mode::key:
            if (c != '"') return false;
            mode_ = Mode::string;
            in_key_ = true;
            return true;
        case Mode::colon:
            if (c != ':') return false;
            mode_ = Mode::value;
            return true;
        case Mode::next_in_object:
            if (c == '}') return close();
            if (c != ',') return false;
            mode_ = Mode::key;
            return true;
        case Mode::next_in_array:
            if (c == ']') return close();
            if (c != ',') return false;
            mode_ = Mode::value;
            return true;
        case Mode::value_or_end:
            if (c == ']') return close();
            [[fallthrough]];
        case Mode::value:
            switch (c) {
                case '{': return open(true);
                case '[': return open(false);
                case '"': mode_ = Mode::string; return true;
                case '-': mode_ = Mode::number; number_ = JsonNumber::minus; return true;
                case 't': literal_ = "rue"; mode_ = Mode::literal; return true;
                case 'f': literal_ = "alse"; mode_ = Mode::literal; return true;
                case 'n': literal_ = "ull"; mode_ = Mode::literal; return true;
                default:
                    if (!json_digit(c)) return false;
                    mode_ = Mode::number;
                    number_ = json_number_start(c);
                    return true;
            }
        default:
            return false;  // done: nothing but whitespace
    }
}

GuideVocabulary::GuideVocabulary(std::vector<std::string> texts, std::int32_t eos) : texts_(std::move(texts)), eos_(eos) {
    plain_.assign(texts_.size(), 0);
    chars_.assign(texts_.size(), 0);
    for (std::size_t t = 0; t < texts_.size(); ++t) {
        if (texts_[t].empty() || std::int32_t(t) == eos_) {
            textless_.push_back(std::int32_t(t));
            continue;
        }
        if (texts_[t].find('>') != std::string::npos) tag_enders_.push_back(std::int32_t(t));
        bool plain = true;
        std::size_t chars = 0;
        for (const char ch : texts_[t]) {
            plain = plain && ch != '"' && ch != '\\' && static_cast<unsigned char>(ch) >= 0x20;
            chars += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
        }
        chars_[t] = std::uint16_t(std::min<std::size_t>(chars, 65535));
        if (plain) plain_[t] = 1, longest_plain_ = std::max<std::int64_t>(longest_plain_, chars_[t]);
        else special_.push_back(std::int32_t(t));
    }
    // Insert the texts in sorted order: each shares with the previous one exactly the path of
    // their common prefix, so the trie is built in one pass and equal texts end at one node.
    std::vector<std::int32_t> order;
    for (std::size_t t = 0; t < texts_.size(); ++t)
        if (!texts_[t].empty()) order.push_back(std::int32_t(t));
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
        return texts_[std::size_t(a)] < texts_[std::size_t(b)] || (texts_[std::size_t(a)] == texts_[std::size_t(b)] && a < b);
    });
    trie_.emplace_back();
    std::vector<std::int32_t> path = {0}, last_child = {-1};
    const std::string* prev = nullptr;
    for (const std::int32_t t : order) {
        const std::string& text = texts_[std::size_t(t)];
        std::size_t shared = 0;
        if (prev)
            while (shared < prev->size() && shared < text.size() && (*prev)[shared] == text[shared]) ++shared;
        path.resize(shared + 1);
        for (std::size_t d = shared; d < text.size(); ++d) {
            const std::int32_t parent = path[d], node = std::int32_t(trie_.size());
            trie_.emplace_back();
            last_child.push_back(-1);
            trie_.back().byte = static_cast<unsigned char>(text[d]);
            if (last_child[std::size_t(parent)] < 0) trie_[std::size_t(parent)].first_child = node;
            else trie_[std::size_t(last_child[std::size_t(parent)])].next_sibling = node;
            last_child[std::size_t(parent)] = node;
            path.push_back(node);
        }
        Node& end = trie_[std::size_t(path[text.size()])];
        if (end.tokens_begin == end.tokens_end) end.tokens_begin = std::uint32_t(tokens_.size());
        tokens_.push_back(t);
        end.tokens_end = std::uint32_t(tokens_.size());
        prev = &text;
    }
}

template <class Prefix>
void mask_guided(const Prefix& state, const GuideVocabulary& vocab, float* logits, int n_vocab, float drop,
                 const std::vector<std::int32_t>& end_tokens) {
    thread_local std::vector<unsigned char> allowed;
    thread_local std::vector<std::pair<std::int32_t, Prefix>> stack;
    allowed.assign(std::size_t(n_vocab), 0);
    bool any = false;
    const auto keep = [&](std::int32_t t) {
        if (t < n_vocab && t != vocab.eos_) allowed[std::size_t(t)] = 1, any = true;
    };
    // Inside a JSON string the plain tokens are known (a shortcut); the others are tried whole.
    const auto try_special = [&] {
        for (const std::int32_t t : vocab.special_) {
            Prefix next = state;
            if (t < n_vocab && next.feed(vocab.texts_[std::size_t(t)])) keep(t);
        }
    };
    const AutomatonAt a = state.automaton();
    const std::uint64_t* cached = a.dfa && !state.complete() ? a.dfa->token_cache().tokens_from(*a.dfa, a.state, vocab) : nullptr;
    if constexpr (std::is_same_v<Prefix, GrammarPrefix>)
        if (!state.complete()) cached = state.tokens(vocab);  // a grammar's stacks: the walk once per set
    if (cached) {
        const bool recheck = a.exact_within < vocab.longest_plain_;
        const std::size_t n = std::min(std::size_t(n_vocab), vocab.size());
        for (std::size_t w = 0; w < (n + 63) / 64; ++w)  // set bits only: a selective state costs little
            for (std::uint64_t m = cached[w]; m; m &= m - 1) {
                const std::size_t t = w * 64 + std::size_t(__builtin_ctzll(m));
                if (t >= n || std::int32_t(t) == vocab.eos_ || (a.plain_only && !vocab.plain_[t])) continue;
                if (recheck) {
                    Prefix next = state;
                    if (!next.feed(vocab.texts_[t])) continue;
                }
                allowed[t] = 1, any = true;
            }
        if (a.plain_only) try_special();
    } else if (const std::int64_t room = state.string_room(); room >= 0) {
        const std::size_t n = std::min(std::size_t(n_vocab), vocab.plain_.size());
        if (room == kAnyLength)
            for (std::size_t t = 0; t < n; ++t) allowed[t] = vocab.plain_[t];
        else
            for (std::size_t t = 0; t < n; ++t) allowed[t] = vocab.plain_[t] && vocab.chars_[t] <= room;
        any = std::find(allowed.begin(), allowed.begin() + std::ptrdiff_t(n), 1) != allowed.begin() + std::ptrdiff_t(n);
        try_special();
    } else if (!state.complete()) {
        vocab.walk(state, [](Prefix& s, unsigned char b) { const char c = char(b); return s.feed(std::string_view(&c, 1)); }, keep,
                   stack);
    }
    const bool keep_eos = state.can_end() || !any;
    if (keep_eos)  // an end of turn without text (a control token) ends the text as EOS does
        for (const std::int32_t t : end_tokens)
            if (t >= 0 && t < n_vocab && std::size_t(t) < vocab.size() && vocab.texts_[std::size_t(t)].empty()) allowed[std::size_t(t)] = 1;
    for (int t = 0; t < n_vocab; ++t)
        if (!allowed[std::size_t(t)] && !(t == vocab.eos_ && keep_eos)) logits[t] = drop;
}

template void mask_guided(const JsonPrefix&, const GuideVocabulary&, float*, int, float, const std::vector<std::int32_t>&);
template void mask_guided(const JsonSchemaPrefix&, const GuideVocabulary&, float*, int, float, const std::vector<std::int32_t>&);
template void mask_guided(const RegexPrefix&, const GuideVocabulary&, float*, int, float, const std::vector<std::int32_t>&);
template void mask_guided(const GrammarPrefix&, const GuideVocabulary&, float*, int, float, const std::vector<std::int32_t>&);

}  // namespace aqpim::serve
