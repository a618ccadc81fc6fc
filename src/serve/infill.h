#pragma once
// Fill-in-the-middle (/v1/completions with `suffix`, docs/serve.md "Fill in the middle"): a code
// model's FIM tokens, found in its vocabulary by their text, and the prompt they make.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "aqpim/tokenizer.h"

namespace aqpim::serve {

struct FimTokens {
    std::int32_t prefix = -1, suffix = -1, middle = -1;
    /// Tokens that end the middle besides EOS (an end-of-text, a file separator, FIM padding).
    std::vector<std::int32_t> end;
};

/// The vocabulary's FIM tokens: Qwen2.5-Coder's and CodeGemma's <|fim_prefix|> <|fim_suffix|>
/// <|fim_middle|>, StarCoder's <fim_prefix> <fim_suffix> <fim_middle>, DeepSeek-Coder's
/// <｜fim▁begin｜> <｜fim▁hole｜> <｜fim▁end｜>, CodeLlama's ▁<PRE> ▁<SUF> ▁<MID>; nullopt when none of
/// these sets is whole.
std::optional<FimTokens> find_fim_tokens(const VocabData& vocab);

/// The infill prompt in the order the models were trained on and llama.cpp's infill writes:
/// [BOS] PREFIX-token prefix SUFFIX-token suffix MIDDLE-token (prefix as token ids, suffix as text
/// encoded without BOS); the model writes the middle.
std::vector<std::int32_t> infill_prompt(const Tokenizer& tokenizer, const FimTokens& fim, const std::vector<std::int32_t>& prefix,
                                        std::string_view suffix);

}  // namespace aqpim::serve
