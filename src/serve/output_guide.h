#pragma once
// A sequence's output constraint (docs/serve.md "JSON mode", "JSON schemas", "Regular expressions
// and choices", "Grammars"): the recognizer of its text so far, and the token mask it gives. A reasoning
// model's answer may reason first and is held to the constraint after its reasoning ("Reasoning").

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "serve/grammar.h"
#include "serve/json_constraint.h"
#include "serve/json_schema.h"
#include "serve/reasoning.h"
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
    /// The whole text matches `grammar`'s root; the grammar must outlive the guide.
    explicit OutputGuide(const Grammar& grammar) : state_(GrammarPrefix(grammar)) {}

    /// Before any text: the answer reasons first, and the constraint holds after its </think>.
    /// `start` is where the prompt left it: open (it starts in the reasoning), free (a first token
    /// that opens with <think>, one token in a reasoning model's vocabulary, reasons; any other
    /// answers at once, and a constraint that itself takes that token keeps the whole answer), closed (the constraint from the start, as without this call). The
    /// reasoning holds any text but EOS and `end_tokens`; it ends at the first </think>.
    void reason_first(ReasoningStart start);

    bool feed(std::string_view text);
    /// Nothing may follow: the request ends with `stop`.
    bool complete() const;
    /// mask_guided (json_constraint.h) with this guide's recognizer.
    void mask(const GuideVocabulary& vocab, float* logits, int n_vocab, float drop,
              const std::vector<std::int32_t>& end_tokens = {}) const;

private:
    using Recognizer = std::variant<JsonPrefix, JsonSchemaPrefix, RegexPrefix, GrammarPrefix>;
    enum class Phase : std::uint8_t {
        answer,     ///< the constraint reads the text
        opening,    ///< nothing written yet: a first token opening with <think> reasons
        reasoning,  ///< up to </think>; held_: a tail that may begin it
    };
    static bool feed(Recognizer& r, std::string_view text);
    /// The reasoning reads `text`: past </think>, the constraint reads the rest.
    bool feed_reasoning(std::string_view text);
    /// A copy of this guide, in (or put in) the reasoning, reads `text` (a candidate token's) and stays alive.
    bool reasoning_admits(std::string_view text) const;

    Recognizer state_;
    Phase phase_ = Phase::answer;
    std::string held_;  ///< reasoning: a tail that may begin </think>
};

}  // namespace aqpim::serve
