#pragma once
// A sequence's output constraint (docs/serve.md "JSON mode", "JSON schemas", "Regular expressions
// and choices"): the recognizer of its text so far, and the token mask it gives.

#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

#include "serve/json_constraint.h"
#include "serve/json_schema.h"
#include "serve/regex_dfa.h"

namespace aqpim::serve {

class OutputGuide {
public:
    /// JSON mode without a schema.
    OutputGuide() = default;
    /// JSON mode with `schema` (nullptr: without one); the schema must outlive the guide.
    explicit OutputGuide(const JsonSchema* schema);
    /// The whole text matches `pattern` (compiled with RegexDfa::Match::whole), which must outlive the guide.
    explicit OutputGuide(const RegexDfa& pattern) : state_(RegexPrefix(pattern)) {}

    bool feed(std::string_view text);
    /// Nothing may follow: the request ends with `stop`.
    bool complete() const;
    /// mask_guided (json_constraint.h) with this guide's recognizer.
    void mask(const GuideVocabulary& vocab, float* logits, int n_vocab, float drop,
              const std::vector<std::int32_t>& end_tokens = {}) const;

private:
    std::variant<JsonPrefix, JsonSchemaPrefix, RegexPrefix> state_;
};

}  // namespace aqpim::serve
