// Fill-in-the-middle prompts (infill.h).

#include "serve/infill.h"

#include <algorithm>
#include <array>
#include <limits>
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
        FimTokens f{find_token(vocab, set[0]), find_token(vocab, set[1]), find_token(vocab, set[2]), -1, -1, {}};
        if (f.prefix < 0 || f.suffix < 0 || f.middle < 0) continue;
        for (const auto& [repo, sep] : {std::pair<std::string_view, std::string_view>{"<|repo_name|>", "<|file_sep|>"}, {"<repo_name>", "<file_sep>"}})
            if (f.repo < 0 && find_token(vocab, repo) >= 0 && find_token(vocab, sep) >= 0)
                f.repo = find_token(vocab, repo), f.file_sep = find_token(vocab, sep);
        for (const std::string_view e : kEnds)
            if (const std::int32_t t = find_token(vocab, e); t >= 0 && t != vocab.eos) f.end.push_back(t);
        return f;
    }
    return std::nullopt;
}

std::vector<std::int32_t> infill_prompt(const Tokenizer& tokenizer, const FimTokens& fim, const std::vector<std::int32_t>& prefix,
                                        std::string_view suffix) {
    return infill_prompt(tokenizer, fim, {{}, prefix, {}, tokenizer.encode(std::string(suffix), false)},
                         std::numeric_limits<std::size_t>::max());
}

std::vector<std::int32_t> infill_extra_tokens(const Tokenizer& tokenizer, const FimTokens& fim,
                                              const std::vector<InfillFile>& files) {
    std::vector<std::int32_t> out;
    const auto add = [&](std::string_view text) {
        const std::vector<std::int32_t> t = tokenizer.encode(text, false);
        out.insert(out.end(), t.begin(), t.end());
    };
    const bool repo = fim.repo >= 0 && fim.file_sep >= 0;
    if (repo) {
        out.push_back(fim.repo);
        add("myproject\n");
    }
    for (const InfillFile& f : files) {
        if (repo) {
            out.push_back(fim.file_sep);
            add(f.filename + "\n");
        } else {
            add("\n\n--- snippet ---\n\n");
        }
        add(f.text);
    }
    if (repo) {
        out.push_back(fim.file_sep);
        add("filename\n");
    }
    return out;
}

std::vector<std::int32_t> infill_prompt(const Tokenizer& tokenizer, const FimTokens& fim, const InfillParts& parts,
                                        std::size_t max_tokens) {
    const bool bos = tokenizer.vocab().add_bos && tokenizer.bos() >= 0;
    const std::size_t fixed = (bos ? 1 : 0) + 3 + parts.prompt.size();
    const std::size_t room = max_tokens > fixed ? max_tokens - fixed : 0;
    // The prefix keeps its end and the suffix its start, 3:1 when both need more than the room.
    const std::size_t prefix_share = std::max(room - std::min(room, parts.suffix.size()), room - room / 4);
    const std::size_t n_prefix = std::min(parts.prefix.size(), prefix_share);
    const std::size_t n_suffix = std::min(parts.suffix.size(), room - n_prefix);
    const std::size_t n_extra = std::min(parts.extra.size(), room - n_prefix - n_suffix);
    std::vector<std::int32_t> out;
    if (bos) out.push_back(tokenizer.bos());
    out.insert(out.end(), parts.extra.end() - std::ptrdiff_t(n_extra), parts.extra.end());
    out.push_back(fim.prefix);
    out.insert(out.end(), parts.prefix.end() - std::ptrdiff_t(n_prefix), parts.prefix.end());
    out.insert(out.end(), parts.prompt.begin(), parts.prompt.end());
    out.push_back(fim.suffix);
    out.insert(out.end(), parts.suffix.begin(), parts.suffix.begin() + std::ptrdiff_t(n_suffix));
    out.push_back(fim.middle);
    return out;
}

}  // namespace aqpim::serve
