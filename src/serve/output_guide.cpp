// A sequence's output constraint (output_guide.h).

#include "serve/output_guide.h"

namespace aqpim::serve {

namespace {

bool opens_reasoning(std::string_view text) { return text.substr(0, kThinkOpen.size()) == kThinkOpen; }

}  // namespace

OutputGuide::OutputGuide(const JsonSchema* schema) {
    if (schema) state_.emplace<JsonSchemaPrefix>(*schema);
}

void OutputGuide::reason_first(ReasoningStart start) {
    if (start == ReasoningStart::closed) return;
    phase_ = start == ReasoningStart::open ? Phase::reasoning : Phase::opening;
    held_.clear();
}

bool OutputGuide::feed(Recognizer& r, std::string_view text) {
    return std::visit([&](auto& s) { return s.feed(text); }, r);
}

bool OutputGuide::feed(std::string_view text) {
    if (phase_ == Phase::answer) return feed(state_, text);
    if (phase_ == Phase::reasoning) return feed_reasoning(text);
    if (text.empty()) return true;
    // The first token: the constraint's from the start if it takes it (a constraint that writes
    // <think> itself holds the whole answer), else a reasoning if it opens with <think>.
    const Recognizer fresh = state_;
    phase_ = Phase::answer;
    if (feed(state_, text)) return true;
    if (!opens_reasoning(text)) return false;
    state_ = fresh;
    phase_ = Phase::reasoning;
    return feed_reasoning(text.substr(kThinkOpen.size()));
}

bool OutputGuide::feed_reasoning(std::string_view text) {
    const std::string all = held_ + std::string(text);
    const std::size_t close = all.find(kThinkClose);
    if (close == std::string::npos) {
        held_ = all.substr(all.size() - partial_tag_at_end(all, kThinkClose));
        return true;
    }
    phase_ = Phase::answer;
    held_.clear();
    return feed(state_, std::string_view(all).substr(close + kThinkClose.size()));
}

bool OutputGuide::reasoning_admits(std::string_view text) const {
    OutputGuide copy = *this;
    copy.phase_ = Phase::reasoning;
    return copy.feed_reasoning(text);
}

bool OutputGuide::complete() const {
    return phase_ == Phase::answer && std::visit([](const auto& s) { return s.complete(); }, state_);
}

void OutputGuide::mask(const GuideVocabulary& vocab, float* logits, int n_vocab, float drop,
                       const std::vector<std::int32_t>& end_tokens) const {
    auto mask_answer = [&] { std::visit([&](const auto& s) { mask_guided(s, vocab, logits, n_vocab, drop, end_tokens); }, state_); };
    switch (phase_) {
        case Phase::answer: mask_answer(); return;
        case Phase::reasoning:
            // Any text, but the answer must come: no EOS, no end of turn, and a </think> only with
            // what follows it in the token a beginning of the answer.
            for (const std::int32_t t : vocab.textless()) logits[t] = drop;
            for (const std::int32_t t : end_tokens) logits[t] = drop;
            for (const std::int32_t t : vocab.tag_enders())
                if ((held_ + vocab.text(t)).find(kThinkClose) != std::string::npos && !reasoning_admits(vocab.text(t))) logits[t] = drop;
            return;
        case Phase::opening: {
            // Either way: the tokens the constraint takes from the start, and those that open with
            // <think> (tried on a copy: what follows the tag in the token is reasoning, or past
            // a </think> the answer's beginning).
            const std::vector<float> before(logits, logits + n_vocab);
            mask_answer();
            for (std::int32_t t = 0; t < n_vocab && std::size_t(t) < vocab.size(); ++t)
                if (logits[t] == drop && before[std::size_t(t)] != drop && opens_reasoning(vocab.text(t)) &&
                    reasoning_admits(std::string_view(vocab.text(t)).substr(kThinkOpen.size())))
                    logits[t] = before[std::size_t(t)];
            return;
        }
    }
}

}  // namespace aqpim::serve
