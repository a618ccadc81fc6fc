#pragma once
// Byte-level BPE pre-tokenizer: regexes that cut text into words before the merges (llama.cpp's
// unicode_regex_split), run with PCRE2 in UTF + UCP mode so \p{L}, \p{N}, \s and (?!\S) mean what
// they mean in Hugging Face tokenizers (Oniguruma) and in llama.cpp's hand-written matchers.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace aqpim::tok {

/// The regexes of a tokenizer.ggml.pre name, as llama.cpp's llm_tokenizer_bpe lists them:
///   "default" (or "")                 4 regexes: punctuation runs, GPT-2's, digit runs, 3 digits
///   "gpt2", "gpt-2", "phi-2"          GPT-2's
///   "llama3", "llama-v3", "llama-bpe" Llama 3's (contractions, \p{N}{1,3}, newline runs)
///   "qwen2", "deepseek-r1-qwen"       Qwen2's (as Llama 3 but single digits)
/// Throws aqpim::Error naming any other name.
std::vector<std::string> pre_tokenizer_regexes(const std::string& name);
/// True for the names for which llama.cpp sets ignore_merges (the Llama 3 family).
bool pre_tokenizer_ignores_merges(const std::string& name);
/// The regex a Hugging Face tokenizer.json Split pre-tokenizer writes for a known name
/// ("gpt2", "llama3", "qwen2"), to recognise it; "" for other names.
std::string hf_pre_tokenizer_pattern(const std::string& name);

class PreTokenizer {
public:
    /// Compile the regexes (aqpim::Error naming a pattern PCRE2 rejects).
    explicit PreTokenizer(const std::vector<std::string>& patterns);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    /// Words of text as [start, length) byte ranges covering it in order. Each regex splits every
    /// piece the previous one produced (matches and the unmatched stretches between them each become
    /// a piece). Invalid UTF-8 never matches a class and ends up in unmatched stretches.
    std::vector<std::pair<std::size_t, std::size_t>> split(std::string_view text) const;

private:
    struct Compiled;
    std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace aqpim::tok
