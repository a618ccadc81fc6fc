// JSON mode's recognizer and token mask (json_constraint.h).

#include "serve/json_constraint.h"

namespace aqpim::serve {
namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

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
            return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
        case Mode::unicode:
            if (!is_hex(c)) return false;
            if (--hex_left_ == 0) mode_ = Mode::string;
            return true;
        case Mode::literal:
            if (c != static_cast<unsigned char>(*literal_)) return false;
            if (*++literal_ == '\0') value_done();
            return true;
        case Mode::minus:
            if (!is_digit(c)) return false;
            mode_ = c == '0' ? Mode::zero : Mode::integer;
            return true;
        case Mode::point:
            if (!is_digit(c)) return false;
            mode_ = Mode::fraction;
            return true;
        case Mode::exponent:
            if (c == '+' || c == '-') {
                mode_ = Mode::exponent_sign;
                return true;
            }
            [[fallthrough]];
        case Mode::exponent_sign:
            if (!is_digit(c)) return false;
            mode_ = Mode::exponent_digits;
            return true;
        case Mode::zero:
        case Mode::integer:
        case Mode::fraction:
        case Mode::exponent_digits:
            if (is_digit(c) && mode_ != Mode::zero) return true;
            if (c == '.' && (mode_ == Mode::zero || mode_ == Mode::integer)) {
                mode_ = Mode::point;
                return true;
            }
            if ((c == 'e' || c == 'E') && mode_ != Mode::exponent_digits) {
                mode_ = Mode::exponent;
                return true;
            }
            value_done();  // the number ended: c is read after it
            return byte(c);
        default: break;
    }
    // Between tokens.
    if (is_space(c)) {
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
                case '-': mode_ = Mode::minus; return true;
                case 't': literal_ = "rue"; mode_ = Mode::literal; return true;
                case 'f': literal_ = "alse"; mode_ = Mode::literal; return true;
                case 'n': literal_ = "ull"; mode_ = Mode::literal; return true;
                default:
                    if (!is_digit(c)) return false;
                    mode_ = c == '0' ? Mode::zero : Mode::integer;
                    return true;
            }
        default:
            return false;  // done: nothing but whitespace
    }
}

void mask_json(const JsonPrefix& state, const JsonVocabulary& vocab, float* logits, int n_vocab, float drop) {
    const bool complete = state.complete();
    bool any = false;
    for (int t = 0; t < n_vocab; ++t) {
        if (t == vocab.eos) continue;
        const std::string_view text = std::size_t(t) < vocab.texts.size() ? std::string_view(vocab.texts[std::size_t(t)])
                                                                           : std::string_view();
        JsonPrefix next = state;
        if (!complete && !text.empty() && next.feed(text)) {
            any = true;
        } else {
            logits[t] = drop;
        }
    }
    if (vocab.eos >= 0 && vocab.eos < n_vocab && !complete && any) logits[vocab.eos] = drop;
}

}  // namespace aqpim::serve
