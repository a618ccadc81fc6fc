// A sequence's output constraint (output_guide.h).

#include "serve/output_guide.h"

namespace aqpim::serve {

OutputGuide::OutputGuide(const JsonSchema* schema) {
    if (schema) state_.emplace<JsonSchemaPrefix>(*schema);
}

bool OutputGuide::feed(std::string_view text) {
    return std::visit([&](auto& s) { return s.feed(text); }, state_);
}

bool OutputGuide::complete() const {
    return std::visit([](const auto& s) { return s.complete(); }, state_);
}

void OutputGuide::mask(const GuideVocabulary& vocab, float* logits, int n_vocab, float drop,
                       const std::vector<std::int32_t>& end_tokens) const {
    std::visit([&](const auto& s) { mask_guided(s, vocab, logits, n_vocab, drop, end_tokens); }, state_);
}

}  // namespace aqpim::serve
