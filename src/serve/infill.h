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
    /// The repository-level pattern's tokens (Qwen2.5-Coder's <|repo_name|> <|file_sep|>,
    /// StarCoder2's <repo_name> <file_sep>); -1: none.
    std::int32_t repo = -1, file_sep = -1;
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

/// What llama-server's /infill puts around the middle, as tokens.
struct InfillParts {
    std::vector<std::int32_t> extra;   ///< the other files (infill_extra_tokens)
    std::vector<std::int32_t> prefix;  ///< the code before the cursor
    std::vector<std::int32_t> prompt;  ///< text after the prefix (already typed)
    std::vector<std::int32_t> suffix;  ///< the code after the cursor
};

/// The other files before the infill, as llama-server writes them: with the repository tokens,
/// <repo>myproject\n then <file_sep>NAME\nTEXT per file and <file_sep>filename\n for the file
/// being written; without them, each file's text after "\n\n--- snippet ---\n\n".
struct InfillFile {
    std::string filename, text;
};
std::vector<std::int32_t> infill_extra_tokens(const Tokenizer& tokenizer, const FimTokens& fim,
                                              const std::vector<InfillFile>& files);

/// [BOS] extra PREFIX prefix prompt SUFFIX suffix MIDDLE, at most `max_tokens` long where the parts
/// allow it: the fixed tokens and the prompt are kept whole, the prefix keeps its last tokens, up
/// to 3/4 of the room left (more when the suffix needs less), the suffix its first tokens in the
/// rest, and the extra context its last tokens in what they leave.
std::vector<std::int32_t> infill_prompt(const Tokenizer& tokenizer, const FimTokens& fim, const InfillParts& parts,
                                        std::size_t max_tokens);

}  // namespace aqpim::serve
