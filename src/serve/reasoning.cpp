// Reasoning models' answers split into reasoning_content and content (reasoning.h).

#include "serve/reasoning.h"

#include "aqpim/error.h"
#include "core/text_space.h"

namespace aqpim::serve {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

/// The length of the longest tail of `s` that is a proper beginning of `tag`.
std::size_t tag_start_at_end(std::string_view s, std::string_view tag) {
    for (std::size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

}  // namespace

ReasoningFormat parse_reasoning_format(std::string_view name, std::string_view chat_template, bool deepseek_template) {
    if (name == "none") return ReasoningFormat::none;
    if (name == "deepseek") return ReasoningFormat::deepseek;
    if (name == "auto" || name.empty())
        return deepseek_template || chat_template.find(kClose) != std::string_view::npos ? ReasoningFormat::deepseek
                                                                                         : ReasoningFormat::none;
    throw Error(fmt::format("reasoning format '{}': expected auto, none or deepseek", name));
}

const char* reasoning_format_name(ReasoningFormat f) { return f == ReasoningFormat::deepseek ? "deepseek" : "none"; }

ReasoningSplit::Piece ReasoningSplit::feed(std::string_view text) {
    Piece out;
    std::string_view rest = text;
    std::string buffer;
    if (state_ == State::opening) {
        held_ += text;
        const std::string_view t = trim_leading_space(held_);
        if (t.empty() || (t.size() < kOpen.size() && kOpen.substr(0, t.size()) == t)) return out;  // may still open
        if (t.substr(0, kOpen.size()) != kOpen) {
            state_ = State::content;
            out.content = std::move(held_);
            held_.clear();
            return out;
        }
        state_ = State::reasoning;
        buffer = std::string(t.substr(kOpen.size()));
        held_.clear();
        rest = buffer;
    }
    if (state_ == State::reasoning) {
        std::string all = held_ + std::string(rest);
        held_.clear();
        const std::size_t close = all.find(kClose);
        if (close == std::string::npos) {
            const std::size_t keep = tag_start_at_end(all, kClose);
            held_ = all.substr(all.size() - keep);
            out.reasoning = all.substr(0, all.size() - keep);
            return out;
        }
        out.reasoning = all.substr(0, close);
        state_ = State::after;
        buffer = all.substr(close + kClose.size());
        rest = buffer;
    }
    if (state_ == State::after) {
        rest = trim_leading_space(rest);
        if (rest.empty()) return out;
        state_ = State::content;
    }
    out.content += rest;
    return out;
}

ReasoningSplit::Piece ReasoningSplit::finish() {
    Piece out;
    if (state_ == State::opening) out.content = std::move(held_);
    else if (state_ == State::reasoning) out.reasoning = std::move(held_);
    held_.clear();
    return out;
}

ReasoningSplit::Piece ReasoningSplit::whole(std::string_view text) {
    ReasoningSplit s;
    Piece out = s.feed(text);
    Piece end = s.finish();
    out.reasoning += end.reasoning;
    out.content += end.content;
    return out;
}

}  // namespace aqpim::serve
