#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "aqpim/error.h"
#include "tokenizer/unicode.h"

namespace aqpim::tok {

namespace {

// llama.cpp's forms ((?i:...) spelled out); PCRE2 would accept the originals too.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The patterns as Hugging Face tokenizer.json files carry them.
constexpr const char* kHfGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kHfLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kHfQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool is_gpt2(const std::string& n) { return n == "gpt2" || n == "gpt-2" || n == "phi-2"; }
bool is_llama3(const std::string& n) { return n == "llama3" || n == "llama-v3" || n == "llama-bpe"; }
bool is_qwen2(const std::string& n) { return n == "qwen2" || n == "deepseek-r1-qwen"; }

}  // namespace

std::vector<std::string> pre_tokenizer_regexes(const std::string& name) {
    if (name.empty() || name == "default") {
        return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
    }
    if (is_gpt2(name)) return {kGpt2};
    if (is_llama3(name)) return {kLlama3};
    if (is_qwen2(name)) return {kQwen2};
    AQPIM_FAIL("pre-tokenizer '{}' is not supported (expected default, gpt2, llama3 (llama-bpe) or qwen2)", name);
}

bool pre_tokenizer_ignores_merges(const std::string& name) { return is_llama3(name); }

std::string hf_pre_tokenizer_pattern(const std::string& name) {
    if (is_gpt2(name)) return kHfGpt2;
    if (is_llama3(name)) return kHfLlama3;
    if (is_qwen2(name)) return kHfQwen2;
    return {};
}

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
    AQPIM_CHECK(!patterns.empty(), "pre-tokenizer: no regex");
    for (const std::string& p : patterns) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto c = std::make_unique<Compiled>();
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
        if (!c->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            AQPIM_FAIL("pre-tokenizer regex '{}': {} at offset {}", p, reinterpret_cast<const char*>(msg), err_off);
        }
        pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
        regexes_.push_back(std::move(c));
    }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::pair<std::size_t, std::size_t>> PreTokenizer::split(std::string_view text) const {
    std::vector<std::pair<std::size_t, std::size_t>> pieces, next;
    if (text.empty()) return pieces;
    pieces.emplace_back(0, text.size());
    for (const auto& re : regexes_) {
        std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md_owner(
            pcre2_match_data_create_from_pattern(re->code, nullptr), pcre2_match_data_free);
        pcre2_match_data* md = md_owner.get();
        AQPIM_CHECK(md != nullptr, "pre-tokenizer: out of memory");
        next.clear();
        next.reserve(pieces.size() * 2);
        for (const auto& [start, len] : pieces) {
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + start);
            std::size_t pos = 0, last = 0;  // search from pos; [last, match) is unmatched so far
            while (pos < len) {
                int rc = pcre2_match(re->code, subject, len, pos, 0, md, nullptr);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re->code, subject, len, pos, PCRE2_NO_JIT, md, nullptr);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    PCRE2_UCHAR msg[256];
                    pcre2_get_error_message(rc, msg, sizeof msg);
                    AQPIM_FAIL("pre-tokenizer: regex match failed: {}", reinterpret_cast<const char*>(msg));
                }
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                const std::size_t m0 = ov[0], m1 = ov[1];
                if (m1 <= m0) {  // an empty match (a custom regex could): move on by one character
                    if (m0 >= len) break;
                    pos = m0 + std::min(unicode::utf8_len(static_cast<unsigned char>(text[start + m0])), len - m0);
                    continue;
                }
                if (m0 > last) next.emplace_back(start + last, m0 - last);
                next.emplace_back(start + m0, m1 - m0);
                last = pos = m1;
            }
            if (last < len) next.emplace_back(start + last, len - last);
        }
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace aqpim::tok
