#pragma once
// JSON mode (`response_format: {"type": "json_object"}`, docs/serve.md "JSON mode"): each step the
// tokens whose text would not continue the generated text as a JSON object are dropped before the
// sampler draws, and EOS is allowed only once the object is complete (then it is the only token).
// The vocabulary's trie and the mask serve every output constraint (output_guide.h).

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "serve/json_bytes.h"

namespace aqpim::serve {

class RegexDfa;

/// Where a recognizer reads its next bytes through an automaton alone (RegexPrefix; a `pattern`'s
/// string of JsonSchemaPrefix, whose plain tokens only): the mask then takes the tokens the
/// automaton reads from `state` from the automaton's TokenSetCache.
struct AutomatonAt {
    const RegexDfa* dfa = nullptr;  ///< nullptr: not here
    std::int32_t state = 0;
    bool plain_only = false;        ///< inside a JSON string: tokens with '"', '\\' or a control byte are tried whole
    /// The recognizer admits every text the automaton reads up to this many characters (a
    /// length bound admits fewer beyond): a cached token of more is tried whole.
    std::int64_t exact_within = std::numeric_limits<std::int64_t>::max();
};

/// string_room() of a string without a length bound (JsonPrefix, JsonSchemaPrefix).
inline constexpr std::int64_t kAnyLength = std::numeric_limits<std::int64_t>::max();

/// Reads text byte by byte and says whether it is still the beginning of one JSON object
/// (RFC 8259, whitespace around it allowed). A small value: copying it is how a candidate
/// continuation is tried. Bytes >= 0x80 are accepted inside strings without UTF-8 validation.
class JsonPrefix {
public:
    static constexpr int kMaxDepth = 64;       ///< objects and arrays nested deeper are refused
    /// Whitespace between tokens, as llama.cpp's JSON grammar bounds it (a model left free fills
    /// its whole budget with it): a run is at most one newline and kMaxWhitespace bytes, no '\r'.
    static constexpr int kMaxWhitespace = 21;

    /// Feed more text; false when it makes the text no prefix of a JSON object (the state is then
    /// spent: feed a copy to try a continuation).
    bool feed(std::string_view text);
    /// A whole object has been read (only whitespace may follow).
    bool complete() const { return mode_ == Mode::done; }
    /// The text may end here (EOS allowed): for an object, once it is complete.
    bool can_end() const { return complete(); }
    /// Inside a string, after no backslash, any text without '"', '\\' or a byte below 0x20
    /// continues it: kAnyLength there, -1 elsewhere (mask_guided's shortcut).
    std::int64_t string_room() const { return mode_ == Mode::string ? kAnyLength : -1; }
    AutomatonAt automaton() const { return {}; }

private:
    enum class Mode : std::uint8_t {
        start,           ///< nothing but whitespace yet: '{' opens the object
        value,           ///< a value must come (after ':' or ',' in an array)
        key_or_end,      ///< after '{': a key or '}'
        key,             ///< after ',' in an object: a key
        colon,           ///< after a key
        next_in_object,  ///< after a member's value: ',' or '}'
        value_or_end,    ///< after '[': a value or ']'
        next_in_array,   ///< after an element: ',' or ']'
        string,          ///< inside a string (a key when in_key_)
        escape,          ///< after '\' in a string
        unicode,         ///< after "\u": hex_left_ hex digits to go
        number,          ///< inside a number (number_ says where)
        literal,         ///< inside true / false / null
        done,            ///< the object is complete
    };
    bool byte(unsigned char c);
    bool open(bool object);
    bool close();
    void value_done();

    Mode mode_ = Mode::start;
    bool in_key_ = false;
    std::uint8_t depth_ = 0;
    std::uint64_t objects_ = 0;  ///< bit i: the container at depth i + 1 is an object (else an array)
    std::uint8_t hex_left_ = 0;
    std::uint8_t whitespace_ = 0;  ///< bytes of the current run of whitespace outside strings
    bool newline_ = false;         ///< the current run holds a newline
    const char* literal_ = nullptr;  ///< the rest of the literal being read
    JsonNumber number_ = JsonNumber::minus;
};

class GuideVocabulary;
template <class Prefix>  // below, with its rules
void mask_guided(const Prefix& state, const GuideVocabulary& vocab, float* logits, int n_vocab, float drop,
                 const std::vector<std::int32_t>& end_tokens = {});

/// Token texts for the mask, built once per server: each token's text as it reads after an
/// ordinary token (a leading space kept: dropping it never turns a valid continuation invalid),
/// and the texts as a trie, so that a prefix many tokens share is read once and a refused one
/// rules out every token under it (bench/bench_json_mask.cpp, docs/serve.md "JSON mode").
class GuideVocabulary {
public:
    GuideVocabulary(std::vector<std::string> texts, std::int32_t eos);

    std::int32_t eos() const { return eos_; }
    std::size_t size() const { return texts_.size(); }
    const std::string& text(std::int32_t t) const { return texts_[std::size_t(t)]; }
    /// EOS and the tokens without text.
    const std::vector<std::int32_t>& textless() const { return textless_; }
    /// The tokens whose text holds '>': only they can complete a tag such as </think>.
    const std::vector<std::int32_t>& tag_enders() const { return tag_enders_; }
    /// Depth first over the texts' trie from `start`: a node's state is its parent's after
    /// `step(state, byte)` (false: the byte is refused, and with it every token under the node);
    /// `take(token)` for each token whose whole text was read. `stack` is scratch.
    template <class State, class Step, class Take>
    void walk(const State& start, Step step, Take take, std::vector<std::pair<std::int32_t, State>>& stack) const {
        stack.clear();
        stack.emplace_back(0, start);
        while (!stack.empty()) {
            auto [node, at] = std::move(stack.back());  // moved: a recognizer may hold a vector
            stack.pop_back();
            for (std::int32_t c = trie_[std::size_t(node)].first_child; c >= 0; c = trie_[std::size_t(c)].next_sibling) {
                const Node& child = trie_[std::size_t(c)];
                State next = at;
                if (!step(next, child.byte)) continue;
                for (std::uint32_t i = child.tokens_begin; i < child.tokens_end; ++i) take(tokens_[i]);
                if (child.first_child >= 0) stack.emplace_back(c, std::move(next));
            }
        }
    }

private:
    template <class Prefix>
    friend void mask_guided(const Prefix&, const GuideVocabulary&, float*, int, float, const std::vector<std::int32_t>&);
    struct Node {
        std::int32_t first_child = -1, next_sibling = -1;
        std::uint32_t tokens_begin = 0, tokens_end = 0;  ///< the tokens whose text ends here: tokens_[begin, end)
        unsigned char byte = 0;                           ///< the edge from the parent
    };
    std::vector<std::string> texts_;
    std::int32_t eos_ = -1;
    std::vector<Node> trie_;            ///< node 0: the root (the empty text, no token)
    std::vector<std::int32_t> tokens_;  ///< token ids by node
    /// Inside a string (most of a JSON text's tokens), the trie would be walked whole: there a
    /// token is tried only if its text holds '"', '\\' or a byte below 0x20 (`special_`); the
    /// others (`plain_`) continue the string as they are, when it has room for their characters
    /// (`chars_`: UTF-8 code points, counted as JsonSchemaPrefix counts them; at most 65535).
    std::vector<unsigned char> plain_;
    std::vector<std::uint16_t> chars_;
    std::int64_t longest_plain_ = 0;  ///< the most chars_ of a plain token
    std::vector<std::int32_t> special_;
    std::vector<std::int32_t> textless_, tag_enders_;
};

/// Per recognizer state, the tokens whose whole text it reads without a dead step (a bit per
/// token), found by one walk of the vocabulary's trie the first time the state is masked: later
/// steps in that state cost a pass over the bits instead of the walk. The states are a regex
/// automaton's (tokens_from) or a grammar's stacks (tokens, keyed by their bytes). Thread-safe
/// (sequences of one request are masked on several threads). Its sets take bytes from a budget
/// (its own, or one shared with the other patterns of a schema: share_budget); past that a state
/// is walked each time (nullptr), as it is for any vocabulary but the first one it was asked about.
class TokenSetCache {
public:
    static constexpr std::int64_t kMaxBytes = std::int64_t(1) << 20;  ///< 64 states at 128K tokens, 2048 at 4096

    TokenSetCache() : budget_(std::make_shared<std::atomic<std::int64_t>>(kMaxBytes)) {}
    /// Draw from `budget` (bytes left) from now on; call before the first lookup.
    void share_budget(std::shared_ptr<std::atomic<std::int64_t>> budget) { budget_ = std::move(budget); }
    const std::uint64_t* tokens_from(const RegexDfa& dfa, std::int32_t state, const GuideVocabulary& vocab);
    /// The set of the state named `key`; the first time, `fill` sets its bits (zeroed before).
    const std::uint64_t* tokens(std::string_view key, const GuideVocabulary& vocab, const std::function<void(std::uint64_t*)>& fill);
    std::size_t bytes() const;

private:
    mutable std::mutex mu_;
    const GuideVocabulary* vocab_ = nullptr;  ///< the sets are this vocabulary's
    std::unordered_map<std::string, std::unique_ptr<std::uint64_t[]>> sets_;
    std::size_t bytes_ = 0;
    std::shared_ptr<std::atomic<std::int64_t>> budget_;
};

/// Sets every token that cannot come next to `drop`: a token whose text would not continue
/// `state`, or has no text; EOS unless `state` can end there; every other token once it is
/// complete (nothing may follow). When nothing else is left, EOS stays. `end_tokens` (a chat
/// format's end of turn, which has no text) are kept wherever EOS is. `Prefix` is JsonPrefix,
/// JsonSchemaPrefix (json_schema.h) or RegexPrefix (regex_dfa.h): a copyable recognizer with
/// feed, complete, can_end, string_room and automaton.
template <class Prefix>
void mask_guided(const Prefix& state, const GuideVocabulary& vocab, float* logits, int n_vocab, float drop,
                 const std::vector<std::int32_t>& end_tokens);

}  // namespace aqpim::serve
