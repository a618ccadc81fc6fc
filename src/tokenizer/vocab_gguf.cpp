// GGUF vocabulary (tokenizer.ggml.*), read and written with the keys llama.cpp's converters use.

#include <cmath>
#include <limits>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/tokenizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace aqpim {

namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";
constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kUnk = "tokenizer.ggml.unknown_token_id";
constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kChatTemplate = "tokenizer.chat_template";
constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

/// A special token id: absent keeps `fallback`; -1 and 0xFFFFFFFF (u32 "none", as converters write
/// for a missing token) give -1; anything else must be a token id.
std::int32_t special_id(const GgufFile& g, const char* key, std::int32_t fallback, std::size_t n) {
    const auto v = g.find_int(key);
    if (!v) return fallback;
    if (*v == -1 || *v == std::int64_t(std::numeric_limits<std::uint32_t>::max())) return -1;
    AQPIM_CHECK(*v >= 0 && std::uint64_t(*v) < n, "{}: {} = {} is outside [0, {})", g.path(), key, *v, n);
    return std::int32_t(*v);
}

}  // namespace

VocabData vocab_from_gguf(const GgufFile& g) {
    VocabData v;
    const std::string model = g.get_string(kModel);
    if (model == "llama") {
        v.kind = VocabKind::spm;
    } else if (model == "gpt2") {
        v.kind = VocabKind::bpe;
    } else {
        AQPIM_FAIL("{}: {} '{}' is not supported (expected 'llama' (SentencePiece) or 'gpt2' (byte-level BPE))",
                   g.path(), kModel, model);
    }
    v.tokens = g.get_string_array(kTokens);
    const std::size_t n = v.tokens.size();
    AQPIM_CHECK(n > 0 && n < std::size_t(std::numeric_limits<std::int32_t>::max()), "{}: {} has {} entries",
                g.path(), kTokens, n);

    if (g.has(kScores)) {
        const auto scores = g.get_float_array(kScores);
        AQPIM_CHECK(scores.size() == n, "{}: {} has {} entries for {} tokens", g.path(), kScores, scores.size(), n);
        v.scores.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            AQPIM_CHECK(!std::isnan(scores[i]), "{}: {}[{}] is NaN", g.path(), kScores, i);
            v.scores.push_back(float(scores[i]));
        }
    } else if (v.kind == VocabKind::spm) {
        v.scores.assign(n, 0.0f);  // llama.cpp: missing scores are 0
    }

    if (g.has(kTypes)) {
        const auto types = g.get_int_array(kTypes);
        AQPIM_CHECK(types.size() == n, "{}: {} has {} entries for {} tokens", g.path(), kTypes, types.size(), n);
        v.types.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            AQPIM_CHECK(types[i] >= 0 && types[i] <= 6, "{}: {}[{}] = {} is not a token type (0..6)", g.path(), kTypes,
                        i, types[i]);
            v.types.push_back(TokenType(types[i]));
        }
    } else {
        v.types.assign(n, TokenType::normal);
    }

    if (g.has(kMerges)) v.merges = g.get_string_array(kMerges);
    AQPIM_CHECK(v.kind == VocabKind::spm || g.has(kMerges), "{}: byte-level BPE vocabulary without {}", g.path(),
                kMerges);
    for (std::size_t i = 0; i < v.merges.size(); ++i) {
        const std::string& m = v.merges[i];
        AQPIM_CHECK(m.size() > 2 && m.find(' ', 1) != std::string::npos && m.find(' ', 1) + 1 < m.size(),
                    "{}: {}[{}] = '{}' is not 'left right'", g.path(), kMerges, i, m);
    }

    // Defaults as llama.cpp's llama_vocab::load: SPM has <unk>, <s>, </s> at 0, 1, 2, adds BOS and a
    // dummy prefix; byte-level BPE has neither (the Llama 3 family adds BOS).
    if (v.kind == VocabKind::spm) {
        v.pre_tokenizer = "default";
        v.unk = n > 0 ? 0 : -1;
        v.bos = n > 1 ? 1 : -1;
        v.eos = n > 2 ? 2 : -1;
        v.add_bos = true;
        v.add_space_prefix = true;
    } else {
        v.pre_tokenizer = g.find_string(kPre).value_or("default");
        (void)tok::pre_tokenizer_regexes(v.pre_tokenizer);  // names an unsupported pre-tokenizer now
        v.ignore_merges = tok::pre_tokenizer_ignores_merges(v.pre_tokenizer);
        v.add_bos = v.ignore_merges;
        v.add_space_prefix = false;
    }
    v.bos = special_id(g, kBos, v.bos, n);
    v.eos = special_id(g, kEos, v.eos, n);
    v.unk = special_id(g, kUnk, v.unk, n);
    v.pad = special_id(g, kPad, -1, n);
    if (auto b = g.find_bool(kAddBos)) v.add_bos = *b;
    if (auto b = g.find_bool(kAddEos)) v.add_eos = *b;
    if (auto b = g.find_bool(kAddSpacePrefix)) v.add_space_prefix = *b;
    v.chat_template = g.find_string(kChatTemplate).value_or("");
    AQPIM_CHECK(!v.add_bos || v.bos >= 0, "{}: {} is set but there is no BOS token", g.path(), kAddBos);
    AQPIM_CHECK(!v.add_eos || v.eos >= 0, "{}: {} is set but there is no EOS token", g.path(), kAddEos);
    return v;
}

void write_vocab_gguf(GgufWriter& w, const VocabData& v) {
    const std::size_t n = v.tokens.size();
    AQPIM_CHECK(n > 0, "write_vocab_gguf: no tokens");
    AQPIM_CHECK(v.scores.empty() || v.scores.size() == n, "write_vocab_gguf: {} scores for {} tokens", v.scores.size(), n);
    AQPIM_CHECK(v.types.empty() || v.types.size() == n, "write_vocab_gguf: {} types for {} tokens", v.types.size(), n);
    AQPIM_CHECK(v.pre_regex.empty(),
                "write_vocab_gguf: a custom pre-tokenizer regex cannot be stored in GGUF (llama.cpp knows "
                "pre-tokenizers by name only): '{}'", v.pre_regex);
    const bool spm = v.kind == VocabKind::spm;
    w.set_string(kModel, spm ? "llama" : "gpt2");
    w.set_string(kPre, spm ? std::string("default") : v.pre_tokenizer);
    w.set_string_array(kTokens, v.tokens);
    if (!v.chat_template.empty()) w.set_string(kChatTemplate, v.chat_template);
    if (spm) w.set_f32_array(kScores, v.scores.empty() ? std::vector<float>(n, 0.0f) : v.scores);
    std::vector<std::int32_t> types(n, std::int32_t(TokenType::normal));
    for (std::size_t i = 0; i < v.types.size(); ++i) types[i] = std::int32_t(v.types[i]);
    w.set_i32_array(kTypes, types);
    if (!spm || !v.merges.empty()) w.set_string_array(kMerges, v.merges);  // llama.cpp requires it for BPE, even empty
    // An absent SPM special token is written as 0xFFFFFFFF (as converters do), since a missing key
    // would mean llama.cpp's default (1 for BOS, ...).
    auto set_id = [&](const char* key, std::int32_t id) {
        AQPIM_CHECK(id >= -1 && id < std::int64_t(n), "write_vocab_gguf: {} = {} is outside [0, {})", key, id, n);
        if (id >= 0) {
            w.set_u32(key, std::uint32_t(id));
        } else if (spm) {
            w.set_u32(key, std::numeric_limits<std::uint32_t>::max());
        }
    };
    set_id(kBos, v.bos);
    set_id(kEos, v.eos);
    set_id(kUnk, v.unk);
    set_id(kPad, v.pad);
    w.set_bool(kAddBos, v.add_bos);
    w.set_bool(kAddEos, v.add_eos);
    if (spm) w.set_bool(kAddSpacePrefix, v.add_space_prefix);
}

}  // namespace aqpim
