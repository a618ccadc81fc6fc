// Fill-in-the-middle prompts (infill.h).

#include "serve/infill.h"

#include <array>
#include <string>

namespace aqpim::serve {

namespace {

std::int32_t find_token(const VocabData& v, std::string_view text) {
    for (std::size_t i = 0; i < v.tokens.size(); ++i)
        if (v.tokens[i] == text) return std::int32_t(i);
    return -1;
}

}  // namespace

std::optional<FimTokens> find_fim_tokens(const VocabData& vocab) {
    static const std::array<std::array<std::string_view, 3>, 4> kSets = {{
        {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
        {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
        {"<\uFF5Cfim\u2581begin\uFF5C>", "<\uFF5Cfim\u2581hole\uFF5C>", "<\uFF5Cfim\u2581end\uFF5C>"},
        {"\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>"},
    }};
    static const std::array<std::string_view, 9> kEnds = {"<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>",
                                                          "<fim_pad>",     "<file_sep>",  "\u2581<EOT>",  "<EOT>", "<|eot_id|>"};
    for (const auto& set : kSets) {
        FimTokens f{find_token(vocab, set[0]), find_token(vocab, set[1]), find_token(vocab, set[2]), {}};
        if (f.prefix < 0 || f.suffix < 0 || f.middle < 0) continue;
        for (const std::string_view e : kEnds)
            if (const std::int32_t t = find_token(vocab, e); t >= 0 && t != vocab.eos) f.end.push_back(t);
        return f;
    }
    return std::nullopt;
}

std::vector<std::int32_t> infill_prompt(const Tokenizer& tokenizer, const FimTokens& fim, const std::vector<std::int32_t>& prefix,
                                        std::string_view suffix) {
    std::vector<std::int32_t> out;
    if (tokenizer.vocab().add_bos && tokenizer.bos() >= 0) out.push_back(tokenizer.bos());
    out.push_back(fim.prefix);
    out.insert(out.end(), prefix.begin(), prefix.end());
    out.push_back(fim.suffix);
    const std::vector<std::int32_t> s = tokenizer.encode(std::string(suffix), false);
    out.insert(out.end(), s.begin(), s.end());
    out.push_back(fim.middle);
    return out;
}

}  // namespace aqpim::serve
