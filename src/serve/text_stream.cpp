#include "serve/text_stream.h"

#include <algorithm>

namespace aqpim::serve {

std::size_t incomplete_utf8_tail(std::string_view text) {
    // Walk back over at most 3 continuation bytes to the lead byte and compare its length.
    const std::size_t n = text.size();
    for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
        const auto c = static_cast<unsigned char>(text[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte
        const std::size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return len > back ? back : 0;
    }
    return 0;  // only continuation bytes: nothing will complete them
}

std::string valid_utf8(std::string_view t) {
    std::string out;
    out.reserve(t.size());
    for (std::size_t i = 0; i < t.size();) {
        const auto c = static_cast<unsigned char>(t[i]);
        // Length and the allowed range of the second byte (no overlong forms, no surrogates).
        std::size_t len = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c < 0x80) len = 1;
        else if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        bool ok = len > 0 && i + len <= t.size();
        for (std::size_t k = 1; ok && k < len; ++k) {
            const auto b = static_cast<unsigned char>(t[i + k]);
            ok = k == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
        }
        if (ok) {
            out.append(t.substr(i, len));
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

TextStream::TextStream(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::string> stops,
                       std::int32_t prev_token)
    : tokenizer_(std::move(tokenizer)), prev_(prev_token) {
    for (auto& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::size_t TextStream::held_bytes() const {
    std::size_t hold = incomplete_utf8_tail(pending_);
    for (const std::string& s : stops_) {
        // The longest proper prefix of s that pending_ ends with.
        for (std::size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
            if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

TextDelta TextStream::release(std::size_t n) {
    TextDelta d;
    d.text = pending_.substr(0, n);
    pending_.erase(0, n);
    while (!pending_tokens_.empty()) {
        Pending& p = pending_tokens_.front();
        if (p.unreleased > n) {
            p.unreleased -= n;
            break;
        }
        n -= p.unreleased;
        p.token.text = valid_utf8(p.token.text);
        d.tokens.push_back(std::move(p.token));
        pending_tokens_.pop_front();
    }
    d.text = valid_utf8(d.text);
    return d;
}

TextDelta TextStream::push(const TokenEvent& e) {
    if (stopped_) return {};
    TokenText t{e.token, tokenizer_->piece(prev_, e.token), e.logprob, e.top_logprobs, true, prev_};
    prev_ = e.token;
    pending_ += t.text;
    const std::size_t n_text = t.text.size();
    pending_tokens_.push_back({std::move(t), n_text});

    std::size_t stop_at = std::string::npos;
    for (const std::string& s : stops_) {
        const std::size_t at = pending_.find(s);
        if (at < stop_at) stop_at = at, stop_word_ = s;
    }
    if (const std::size_t at = indent_break(std::string_view(pending_).substr(pending_.size() - n_text)); at != std::string::npos) {
        const std::size_t in_pending = pending_.size() - n_text + at;
        if (in_pending < stop_at) stop_at = in_pending, stop_word_.clear(), indent_stop_ = true;
    }
    if (stop_at == std::string::npos) return release(pending_.size() - held_bytes());

    stopped_ = true;
    // The text before the stop string is released; the token the stop begins in is kept, cut to
    // its text before the stop, if it has any (some of it may have been released already).
    for (std::size_t i = 0, start = 0; i < pending_tokens_.size(); start += pending_tokens_[i].unreleased, ++i) {
        Pending& p = pending_tokens_[i];
        if (stop_at >= start + p.unreleased) continue;
        const std::size_t cut = stop_at - start;
        const std::size_t kept = p.token.text.size() - p.unreleased + cut;
        p.token.text.resize(kept);
        p.unreleased = cut;
        pending_tokens_.resize(kept > 0 ? i + 1 : i);
        break;
    }
    pending_.resize(stop_at);
    TextDelta d = release(stop_at);
    pending_tokens_.clear();
    return d;
}

std::size_t TextStream::indent_break(std::string_view t) {
    if (min_indent_ <= 0) return std::string::npos;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t[i] == '\n') {
            if (at_line_start_ && indent_ < min_indent_) return i;  // a blank line is under-indented too (llama-server)
            at_line_start_ = true;
            indent_ = 0;
        } else if (at_line_start_ && (t[i] == ' ' || t[i] == '\t')) {
            ++indent_;
        } else if (at_line_start_) {
            at_line_start_ = false;
            if (indent_ < min_indent_) return i;
        }
    }
    return std::string::npos;
}

TextDelta TextStream::flush() {
    if (stopped_) return {};
    return release(pending_.size());
}

}  // namespace aqpim::serve
