// Structured outputs: the recognizer of a compiled schema (json_schema.h).

#include "serve/json_schema.h"

#include <algorithm>

#include "serve/json_bytes.h"

namespace aqpim::serve {
namespace {

using Wide = __int128;
constexpr Wide kScale = JsonSchema::kBoundScale;
constexpr Wide kUnbounded = Wide(1) << 120;

Wide pow10(int k) {
    Wide p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

Wide floor_div(Wide a, Wide b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/// Whether some value in [a, b] (x 1e18) is within the node's bounds and a multiple of its multipleOf.
bool admits_some(const JsonSchema::Node& n, Wide a, Wide b) {
    if (n.has_lowest) a = std::max(a, n.lowest);
    if (n.has_highest) b = std::min(b, n.highest);
    if (a > b) return false;
    return n.multiple == 0 || floor_div(b, n.multiple) * n.multiple >= a;
}

}  // namespace

JsonSchemaPrefix& JsonSchemaPrefix::operator=(const JsonSchemaPrefix& o) {
    schema_ = o.schema_;
    depth_ = o.depth_;
    done_ = o.done_;
    whitespace_ = o.whitespace_;
    newline_ = o.newline_;
    std::copy_n(o.frames_.begin(), depth_, frames_.begin());
    return *this;
}

bool JsonSchemaPrefix::feed(std::string_view text) {
    for (const char ch : text)
        if (!byte(static_cast<unsigned char>(ch))) return false;
    return true;
}

std::int64_t JsonSchemaPrefix::string_room() const {
    if (depth_ == 0) return -1;
    const Frame& f = frames_[depth_ - 1];
    if (f.phase != Phase::chars || f.high_surrogate || schema_->node(f.node).pattern >= 0) return -1;
    const std::int64_t max = schema_->node(f.node).max;
    return max < 0 ? kAnyLength : max - f.count;
}

AutomatonAt JsonSchemaPrefix::automaton() const {
    if (depth_ == 0) return {};
    const Frame& f = frames_[depth_ - 1];
    const int pattern = schema_->node(f.node).pattern;
    if (f.phase != Phase::chars || pattern < 0) return {};
    const int lengths = schema_->node(f.node).lengths;
    return {&schema_->pattern(pattern), f.pattern_state, true,
            lengths < 0 ? kAnyLength : schema_->lengths(lengths).exact_within(f.count)};
}

bool JsonSchemaPrefix::push(Frame f) {
    if (depth_ >= kMaxDepth) return false;
    frames_[depth_++] = f;
    return true;
}

void JsonSchemaPrefix::value_done() {
    const bool was_key = frames_[depth_ - 1].key;
    --depth_;
    if (depth_ == 0) {
        done_ = true;
        return;
    }
    Frame& parent = frames_[depth_ - 1];
    if (was_key) parent.phase = Phase::colon;
    else if (parent.phase == Phase::member_value) {
        parent.phase = Phase::next_member;
        if (schema_->node(parent.node).properties.empty()) ++parent.count;  // free keys: one more member
    }
    else ++parent.count, parent.phase = Phase::next_item;
}

std::uint64_t JsonSchemaPrefix::variant_keys(const Frame& f, std::size_t v) const {
    const JsonSchema::Node& n = schema_->node(f.node);
    const auto& props = schema_->node(n.variants[v]).properties;
    const std::vector<std::uint8_t>& keys = n.variant_keys[v];
    std::uint64_t bits = 0;
    const std::size_t from = f.count == 0 ? 0 : std::size_t(n.variant_at[std::size_t(f.count - 1) * n.variants.size() + v] + 1);
    for (std::size_t j = from; j < props.size(); ++j) {
        bits |= std::uint64_t(1) << keys[j];
        if (props[j].required) break;  // a required property cannot be skipped
    }
    return bits;
}

bool JsonSchemaPrefix::variant_can_close(const Frame& f, std::size_t v) const {
    const JsonSchema::Node& n = schema_->node(f.node);
    const auto& props = schema_->node(n.variants[v]).properties;
    const std::size_t from = f.count == 0 ? 0 : std::size_t(n.variant_at[std::size_t(f.count - 1) * n.variants.size() + v] + 1);
    for (std::size_t j = from; j < props.size(); ++j)
        if (props[j].required) return false;
    return true;
}

std::uint64_t JsonSchemaPrefix::allowed_keys(const Frame& f) const {
    const JsonSchema::Node& n = schema_->node(f.node);
    const auto& props = n.properties;
    if (!n.variants.empty()) {
        std::uint64_t bits = 0;
        for (std::uint64_t m = f.variants; m; m &= m - 1) bits |= variant_keys(f, std::size_t(__builtin_ctzll(m)));
        return bits;
    }
    if (n.one_property) return f.count == 0 ? (props.size() == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << props.size()) - 1) : 0;
    std::uint64_t bits = 0;
    for (std::size_t i = std::size_t(f.count); i < props.size(); ++i) {
        bits |= std::uint64_t(1) << i;
        if (props[i].required) break;  // a required property cannot be skipped
    }
    return bits;
}

bool JsonSchemaPrefix::can_close_object(const Frame& f) const {
    const JsonSchema::Node& n = schema_->node(f.node);
    if (!n.variants.empty()) {
        for (std::uint64_t m = f.variants; m; m &= m - 1)
            if (variant_can_close(f, std::size_t(__builtin_ctzll(m)))) return true;
        return false;
    }
    if (n.one_property) return f.count > 0;
    if (n.properties.empty()) return f.count >= n.min;  // free keys: f.count members written
    const auto& props = n.properties;
    for (std::size_t i = std::size_t(f.count); i < props.size(); ++i)
        if (props[i].required) return false;
    return true;
}

bool JsonSchemaPrefix::start_value(int node, unsigned char c) {
    const JsonSchema::Node& n = schema_->node(node);
    if (!n.first[c]) return false;
    Frame f{};
    f.node = node;
    switch (n.kind) {
        case JsonSchema::Kind::choice:
            for (const int b : n.branches)
                if (schema_->node(b).first[c]) return start_value(b, c);
            return false;
        case JsonSchema::Kind::any:
            return start_value(c == '{' ? JsonSchema::kAnyObject : c == '[' ? JsonSchema::kAnyArray : c == '"' ? JsonSchema::kAnyString
                               : schema_->node(JsonSchema::kAnyNumber).first[c] ? JsonSchema::kAnyNumber : JsonSchema::kAnyLiteral, c);
        case JsonSchema::Kind::object:
            f.phase = Phase::key_or_end;
            f.variants = n.variants.size() == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << n.variants.size()) - 1;
            break;
        case JsonSchema::Kind::array: f.phase = Phase::item_or_end; break;
        case JsonSchema::Kind::string:
            f.phase = Phase::chars;
            if (n.pattern >= 0) f.pattern_state = schema_->pattern(n.pattern).start();
            break;
        case JsonSchema::Kind::number:
        case JsonSchema::Kind::integer:
            f.phase = Phase::number;
            f.number = json_number_start(c);
            f.negative = c == '-';
            if (!f.negative) f.count = c - '0', f.pos = 1;
            f.node = node;
            if (!number_feasible(f)) return false;
            break;
        case JsonSchema::Kind::literal:
            f.phase = Phase::literal;
            f.pos = 1;
            for (std::size_t i = 0; i < n.texts.size(); ++i)
                if (static_cast<unsigned char>(n.texts[i][0]) == c) f.candidates |= std::uint64_t(1) << i;
            if (const Frame* set = unique_array(depth_ - 1)) f.candidates &= ~set->candidates;  // an item of a set: not one written
            if (!n.text_variants.empty())  // a key's literals of several variants: those of a variant still matching
                for (std::size_t i = 0; i < n.texts.size(); ++i)
                    if (!(n.text_variants[i] & frames_[depth_ - 1].variants)) f.candidates &= ~(std::uint64_t(1) << i);
            if (!f.candidates) return false;
            break;
    }
    return push(f);
}

/// Whether a number whose bytes so far are in `f` can still end within its node's bounds: as it
/// is, or with more digits (integer digits, then fraction digits for a number; at most 18 of each).
bool JsonSchemaPrefix::number_feasible(const Frame& f) const {
    const JsonSchema::Node& n = schema_->node(f.node);
    if (!n.exact()) return true;
    const bool integer = n.kind == JsonSchema::Kind::integer;
    const auto hits = [&](Wide a, Wide b) {  // some magnitude in [a, b] (x 1e18), with f's sign, is admitted
        return f.negative ? admits_some(n, -b, -a) : admits_some(n, a, b);
    };
    if (f.number == JsonNumber::minus) return admits_some(n, -kUnbounded, -(integer ? kScale : 1));  // a digit must come: below zero
    if (f.pos > 18) return false;  // at least 1e18: past any bound
    if (f.number == JsonNumber::point || f.number == JsonNumber::fraction) {  // [m.f, m.f + one unit of its last digit)
        const Wide unit = pow10(18 - f.fraction_digits), a = Wide(f.count) * kScale + Wide(f.fraction) * unit;
        return hits(a, a + unit - 1);
    }
    if (f.count == 0) return hits(0, integer ? 0 : kScale - 1);  // a leading 0 takes no more integer digits
    for (int k = 0; f.pos + k <= 18; ++k) {
        const Wide p = pow10(k), a = Wide(f.count) * p * kScale;  // k more integer digits, then any fraction: [m 10^k, (m + 1) 10^k)
        if (hits(a, integer ? a + (p - 1) * kScale : a + p * kScale - 1)) return true;
    }
    return false;
}

/// A number read whole: its value within its node's bounds.
bool JsonSchemaPrefix::number_within(const Frame& f) const {
    const JsonSchema::Node& n = schema_->node(f.node);
    if (!n.exact()) return true;
    if (f.pos > 18) return false;
    const Wide magnitude = Wide(f.count) * kScale + Wide(f.fraction) * pow10(18 - f.fraction_digits);
    const Wide v = f.negative ? -magnitude : magnitude;
    return admits_some(n, v, v);
}

bool JsonSchemaPrefix::in_number(Frame& f, unsigned char c) {
    const JsonSchema::Node& n = schema_->node(f.node);
    const bool bounded = n.exact();
    if (bounded && (c == 'e' || c == 'E')) return false;  // an exact number is written without an exponent
    const JsonNumber before = f.number;
    switch (json_number_step(f.number, c, n.kind == JsonSchema::Kind::integer)) {
        case NumberStep::refused: return false;
        case NumberStep::taken:
            if (!bounded) return true;
            if (json_digit(c) && (before == JsonNumber::point || before == JsonNumber::fraction)) {
                if (f.fraction_digits >= 18) return false;
                f.fraction = f.fraction * 10 + (c - '0');
                ++f.fraction_digits;
            } else if (json_digit(c)) {
                if (f.pos < 18) f.count = f.count * 10 + (c - '0');  // beyond 18 digits only their count matters
                if (f.pos < 65535) ++f.pos;
            }
            return number_feasible(f);
        case NumberStep::ended: break;
    }
    if (!number_within(f)) return false;  // ends here: its value itself must be within
    value_done();  // the number ended: c is read after it
    return byte(c);
}

JsonSchemaPrefix::Frame* JsonSchemaPrefix::unique_array(int at) {
    if (at < 0) return nullptr;
    Frame& f = frames_[std::size_t(at)];
    return schema_->node(f.node).kind == JsonSchema::Kind::array && schema_->node(f.node).unique ? &f : nullptr;
}

bool JsonSchemaPrefix::in_literal(Frame& f, unsigned char c) {
    const auto& texts = schema_->node(f.node).texts;
    std::uint64_t next = 0;
    bool ended = false;
    for (std::uint64_t m = f.candidates; m; m &= m - 1) {
        const std::string& t = texts[std::size_t(__builtin_ctzll(m))];
        if (f.pos < t.size() && static_cast<unsigned char>(t[f.pos]) == c) next |= m & -m;
        ended = ended || f.pos == t.size();
    }
    if (next) {
        f.candidates = next;
        ++f.pos;
        return true;
    }
    if (!ended) return false;
    if (Frame* set = unique_array(depth_ - 2))  // the literal written is used
        for (std::uint64_t m = f.candidates; m; m &= m - 1)
            if (texts[std::size_t(__builtin_ctzll(m))].size() == f.pos) set->candidates |= m & -m;
    if (const auto& text_variants = schema_->node(f.node).text_variants; !text_variants.empty()) {  // only its variants go on
        std::uint64_t variants = 0;
        for (std::uint64_t m = f.candidates; m; m &= m - 1)
            if (texts[std::size_t(__builtin_ctzll(m))].size() == f.pos) variants |= text_variants[std::size_t(__builtin_ctzll(m))];
        frames_[depth_ - 2].variants &= variants;
    }
    value_done();  // a whole value was read: c comes after it
    return byte(c);
}

bool JsonSchemaPrefix::in_string_byte(Frame& f, unsigned char c) {
    // Characters are code points: counted when one is whole (an escape when it ends), a surrogate
    // pair once. A \\u escape of a high surrogate must be followed by one of a low surrogate, and a
    // low one must follow a high one: a lone surrogate is RFC 8259 text that strict parsers refuse.
    const JsonSchema::Node& n = schema_->node(f.node);
    if (n.pattern >= 0) return in_pattern_byte(f, c, n);
    const auto one_more = [&] {
        if (n.max >= 0 && f.count >= n.max) return false;
        ++f.count;
        return true;
    };
    switch (f.phase) {
        case Phase::escape:
            if (c == 'u') {
                f.phase = Phase::unicode;
                f.hex_left = 4;
                f.pos = 0;
                return true;
            }
            f.phase = Phase::chars;
            return !f.high_surrogate && json_short_escape(c) >= 0 && one_more();
        case Phase::unicode: {
            const int h = json_hex_value(c);
            if (h < 0) return false;
            f.pos = std::uint16_t(f.pos * 16 + h);
            // A surrogate half is known from the first two digits: a low one must follow a high
            // one and nothing else may, refused there rather than at the fourth digit (no dead end).
            if (f.hex_left == 4 && f.high_surrogate && f.pos != 0xD) return false;
            if (f.hex_left == 3 && (f.pos >= 0xDC && f.pos <= 0xDF) != f.high_surrogate) return false;
            if (--f.hex_left > 0) return true;
            f.phase = Phase::chars;
            const bool high = f.pos >= 0xD800 && f.pos <= 0xDBFF, low = f.pos >= 0xDC00 && f.pos <= 0xDFFF;
            if (low != f.high_surrogate) return false;  // a lone half, or a high one not followed by its low one
            f.high_surrogate = high;
            return low || one_more();  // the pair was counted at its high half
        }
        default: break;
    }
    if (f.high_surrogate) {  // only "\\u" and a low surrogate may come
        if (c != '\\') return false;
        f.phase = Phase::escape;
        return true;
    }
    if (c == '"') {
        if (f.count < n.min) return false;
        value_done();
        return true;
    }
    if (c < 0x20) return false;
    if (c == '\\') {
        f.phase = Phase::escape;
        return n.max < 0 || f.count < n.max;  // room for the character it will be
    }
    return (c & 0xC0) == 0x80 || one_more();  // UTF-8 continuation bytes continue a character
}

bool JsonSchemaPrefix::in_pattern_byte(Frame& f, unsigned char c, const JsonSchema::Node& n) {
    // The string's characters step the automaton: a plain byte as it is, a short escape as the
    // byte it stands for; \\u escapes are not written here (every character has a shorter form).
    // With a length bound, a step is taken only where a match of an admissible length goes on.
    const RegexDfa& pattern = schema_->pattern(n.pattern);
    const RegexLengths* lengths = n.lengths >= 0 ? &schema_->lengths(n.lengths) : nullptr;
    const auto next_of = [&](unsigned char b, std::int32_t* state, std::int64_t* chars) {
        *state = pattern.next(f.pattern_state, b);
        *chars = f.count + ((b & 0xC0) != 0x80);  // a byte that begins a character counts it
        return *state != RegexDfa::kDead && (!lengths || lengths->feasible(*state, *chars));
    };
    const auto step = [&](unsigned char b) {
        std::int32_t state;
        std::int64_t chars;
        if (!next_of(b, &state, &chars)) return false;
        f.pattern_state = state;
        f.count = chars;
        return true;
    };
    if (f.phase == Phase::escape) {
        f.phase = Phase::chars;
        const int b = json_short_escape(c);
        return b >= 0 && step(static_cast<unsigned char>(b));
    }
    if (c == '"') {
        if (!pattern.accepting(f.pattern_state) || (lengths && f.count < lengths->min_chars())) return false;
        value_done();
        return true;
    }
    if (c == '\\') {  // only when some escaped character leads on
        for (const char e : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) {
            std::int32_t state;
            std::int64_t chars;
            if (next_of(static_cast<unsigned char>(json_short_escape(static_cast<unsigned char>(e))), &state, &chars)) {
                f.phase = Phase::escape;
                return true;
            }
        }
        return false;
    }
    return c >= 0x20 && step(c);
}

bool JsonSchemaPrefix::in_key_text(Frame& f, unsigned char c) {
    const auto& props = schema_->node(f.node).properties;
    std::uint64_t next = 0;
    for (std::uint64_t m = f.candidates; m; m &= m - 1) {
        const std::size_t i = std::size_t(__builtin_ctzll(m));
        const std::string& key = props[i].key;
        if (c == '"' && f.pos == key.size()) {
            if (!schema_->node(f.node).variants.empty()) {  // the variants that admit this key next go on
                std::uint64_t variants = 0;
                for (std::uint64_t v = f.variants; v; v &= v - 1)
                    if (variant_keys(f, std::size_t(__builtin_ctzll(v))) >> i & 1) variants |= v & -v;
                f.variants = variants;
            }
            f.member = std::int32_t(i);
            f.count = std::int64_t(i) + 1;
            f.phase = Phase::colon;
            return true;
        }
        if (f.pos < key.size() && static_cast<unsigned char>(key[f.pos]) == c) next |= m & -m;
    }
    if (!next) return false;
    f.candidates = next;
    ++f.pos;
    return true;
}

bool JsonSchemaPrefix::byte(unsigned char c) {
    if (depth_ > 0) {
        Frame& f = frames_[depth_ - 1];
        switch (f.phase) {
            case Phase::chars:
            case Phase::escape:
            case Phase::unicode: return in_string_byte(f, c);
            case Phase::number: return in_number(f, c);
            case Phase::literal: return in_literal(f, c);
            case Phase::key_text: return in_key_text(f, c);
            default: break;
        }
    }
    // Between tokens.
    if (json_space(c)) {
        if (c == '\r' || (c == '\n' && newline_)) return false;
        newline_ = newline_ || c == '\n';
        return ++whitespace_ <= JsonPrefix::kMaxWhitespace;
    }
    whitespace_ = 0;
    newline_ = false;
    if (depth_ == 0) return !done_ && start_value(schema_->root(), c);
    Frame& f = frames_[depth_ - 1];
    const JsonSchema::Node& n = schema_->node(f.node);
    const auto begin_key = [&] {
        if (c != '"') return false;
        if (n.extra >= 0) {  // a free key: any string or one of propertyNames, while the members are fewer than maxProperties
            if (n.max >= 0 && f.count >= n.max) return false;
            f.member = -1;
            if (n.key >= 0) {
                if (!start_value(n.key, c)) return false;
                frames_[depth_ - 1].key = true;
                return true;
            }
            Frame k{};
            k.node = JsonSchema::kAnyString;
            k.phase = Phase::chars;
            k.key = true;
            f.member = -1;
            return push(k);
        }
        f.candidates = allowed_keys(f);
        f.pos = 0;
        f.phase = Phase::key_text;
        return f.candidates != 0;
    };
    switch (f.phase) {
        case Phase::key_or_end:
            if (c == '}') return can_close_object(f) && (value_done(), true);
            return begin_key();
        case Phase::key: return begin_key();
        case Phase::colon:
            if (c != ':') return false;
            f.phase = Phase::member_value;
            return true;
        case Phase::member_value:
            if (!n.variants.empty()) {  // the variants whose value for the key can start with c go on, read by one node
                std::uint64_t variants = 0;
                int value = -1;
                for (std::uint64_t m = f.variants; m; m &= m - 1) {
                    const int v = n.variant_value[std::size_t(f.member) * n.variants.size() + std::size_t(__builtin_ctzll(m))];
                    if (schema_->node(v).first[c]) variants |= m & -m, value = v;
                }
                f.variants = variants;
                return variants && start_value(value, c);
            }
            return start_value(f.member >= 0 ? n.properties[std::size_t(f.member)].node : n.extra, c);
        case Phase::next_member:
            if (c == '}') return can_close_object(f) && (value_done(), true);
            if (c != ',' || (n.extra < 0 && allowed_keys(f) == 0) || (n.extra >= 0 && n.max >= 0 && f.count >= n.max)) return false;
            f.phase = Phase::key;
            return true;
        case Phase::item_or_end:
            if (c == ']') return f.count >= n.min && (value_done(), true);
            if (n.max == 0) return false;
            f.phase = Phase::item;
            return start_value(n.item(f.count), c);
        case Phase::item: return start_value(n.item(f.count), c);
        case Phase::next_item:
            if (c == ']') return f.count >= n.min && (value_done(), true);
            if (c != ',' || (n.max >= 0 && f.count >= n.max)) return false;  // (a unique array's max: its literals)
            f.phase = Phase::item;
            return true;
        default: return false;
    }
}

}  // namespace aqpim::serve
