// Reasoning models' answers split into reasoning_content and content (reasoning.h).

#include "serve/reasoning.h"

#include "aqpim/error.h"
#include "core/text_space.h"

namespace aqpim::serve {

std::size_t partial_tag_at_end(std::string_view s, std::string_view tag) {
    for (std::size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

ReasoningStart reasoning_start_of(std::string_view prompt) {
    const std::string_view end = trim_space(prompt);
    auto ends_with = [&](std::string_view tag) { return end.size() >= tag.size() && end.substr(end.size() - tag.size()) == tag; };
    if (ends_with(kThinkOpen)) return ReasoningStart::open;
    if (ends_with(kThinkClose)) return ReasoningStart::closed;
    return ReasoningStart::free;
}

bool template_opens_reasoning(std::string_view jinja) {
    // The generation prompt's literal, as the templates write it: <think> right after the
    // assistant's header, with a newline written as such or as the escape \n between them.
    for (const std::string_view header : {"<\uFF5CAssistant\uFF5C><think>", "<|im_start|>assistant\n<think>", "<|im_start|>assistant\\n<think>"})
        if (jinja.find(header) != std::string_view::npos) return true;
    return false;
}

std::string_view reasoning_prompt_end(bool template_opens, bool thinking) {
    if (!thinking) return "<think>\n\n</think>\n\n";
    return template_opens ? "<think>\n" : "";
}

ReasoningFormat parse_reasoning_format(std::string_view name, std::string_view chat_template, bool deepseek_template) {
    if (name == "none") return ReasoningFormat::none;
    if (name == "deepseek") return ReasoningFormat::deepseek;
    if (name == "auto" || name.empty())
        return deepseek_template || chat_template.find(kThinkClose) != std::string_view::npos ? ReasoningFormat::deepseek
                                                                                         : ReasoningFormat::none;
    throw Error(fmt::format("reasoning format '{}': expected auto, none or deepseek", name));
}

const char* reasoning_format_name(ReasoningFormat f) { return f == ReasoningFormat::deepseek ? "deepseek" : "none"; }

ReasoningSplit::ReasoningSplit(ReasoningStart start)
    : state_(start == ReasoningStart::open ? State::reasoning : start == ReasoningStart::closed ? State::content : State::opening) {}

ReasoningSplit::Piece ReasoningSplit::feed(std::string_view text) {
    Piece out;
    std::string_view rest = text;
    std::string buffer;
    if (state_ == State::opening) {
        held_ += text;
        const std::string_view t = trim_leading_space(held_);
        if (t.empty() || (t.size() < kThinkOpen.size() && kThinkOpen.substr(0, t.size()) == t)) return out;  // may still open
        if (t.substr(0, kThinkOpen.size()) != kThinkOpen) {
            state_ = State::content;
            out.content = std::move(held_);
            held_.clear();
            return out;
        }
        state_ = State::reasoning;
        buffer = std::string(t.substr(kThinkOpen.size()));
        held_.clear();
        rest = buffer;
    }
    if (state_ == State::reasoning) {
        std::string all = held_ + std::string(rest);
        held_.clear();
        const std::size_t close = all.find(kThinkClose);
        if (close == std::string::npos) {
            const std::size_t keep = partial_tag_at_end(all, kThinkClose);
            held_ = all.substr(all.size() - keep);
            out.reasoning = all.substr(0, all.size() - keep);
            return out;
        }
        out.reasoning = all.substr(0, close);
        state_ = State::after;
        buffer = all.substr(close + kThinkClose.size());
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

ReasoningSplit::Piece ReasoningSplit::whole(std::string_view text, ReasoningStart start) {
    ReasoningSplit s(start);
    Piece out = s.feed(text);
    Piece end = s.finish();
    out.reasoning += end.reasoning;
    out.content += end.content;
    return out;
}

}  // namespace aqpim::serve
