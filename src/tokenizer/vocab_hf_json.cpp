// Hugging Face tokenizer.json with a BPE model, in one of two shapes:
//   - SentencePiece-style (Llama / TinyStories): normalizer Replace " " -> "▁" (plus Prepend "▁"
//     for the dummy prefix), or a Metaspace pre-tokenizer that does not split; byte_fallback
//     <0xXX> tokens. -> VocabKind::spm with merges by rank (HF's BPE merges by rank, not by score).
//   - byte-level (GPT-2 / Llama 3 / Qwen2): ByteLevel pre-tokenizer, possibly after a Split regex.
//     -> VocabKind::bpe; a known Split regex becomes its name, another one pre_regex.
// Special tokens come from added_tokens (special -> control, else user-defined). BOS/EOS/PAD and
// add_bos/add_eos from tokenizer_config.json beside the file when present, else from the
// TemplateProcessing post-processor.

#include <filesystem>
#include <map>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_io.h"

namespace aqpim {

namespace {

using nlohmann::json;

constexpr const char* kSpaceEscape = "\xE2\x96\x81";

/// Items of a node that may be a {"type": "Sequence", key: [...]} or a single item (or null).
std::vector<json> flatten(const json& node, const char* key) {
    std::vector<json> out;
    if (node.is_null()) return out;
    if (node.is_object() && node.value("type", "") == "Sequence" && node.contains(key) && node[key].is_array()) {
        for (const auto& item : node[key]) {
            auto sub = flatten(item, key);
            out.insert(out.end(), sub.begin(), sub.end());
        }
        return out;
    }
    out.push_back(node);
    return out;
}

std::string string_field(const json& obj, const char* key, const std::string& path, const char* where) {
    AQPIM_CHECK(obj.is_object() && obj.contains(key) && obj[key].is_string(), "{}: {} has no string '{}'", path, where,
                key);
    return obj[key].get<std::string>();
}

/// A pattern node {"String": s} or {"Regex": r}: (is_regex, text).
std::pair<bool, std::string> pattern_of(const json& obj, const std::string& path, const char* where) {
    AQPIM_CHECK(obj.is_object() && obj.contains("pattern") && obj["pattern"].is_object(), "{}: {} has no pattern",
                path, where);
    const json& p = obj["pattern"];
    for (const auto& [key, is_regex] : {std::pair{"String", false}, {"Regex", true}}) {
        if (!p.contains(key) || !p[key].is_string()) continue;
        std::string text = p[key].get<std::string>();
        AQPIM_CHECK(!text.empty(), "{}: {} has an empty {} pattern", path, where, key);
        return {is_regex, std::move(text)};
    }
    AQPIM_FAIL("{}: {} pattern is neither String nor Regex", path, where);
}

/// Token text of a config entry: "text", {"content": "text"} or null (absent); anything else is an error.
std::optional<std::string> config_token(const json& cfg, const char* key, const std::string& path) {
    if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
    const json& t = cfg[key];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
    AQPIM_FAIL("{}: {} is {}, expected the token's text or {{\"content\": text}}", path, key, json_excerpt(t));
}

VocabData parse_tokenizer_json(const json& j, const std::string& path) {
    AQPIM_CHECK(j.is_object(), "{}: expected a JSON object", path);
    AQPIM_CHECK(j.contains("model") && j["model"].is_object(), "{}: no 'model' object", path);
    const json& model = j["model"];
    AQPIM_CHECK(!model.contains("type") || model["type"].is_string(), "{}: model.type is {}, expected a string", path,
                json_excerpt(model["type"]));
    const std::string type = model.contains("type") ? model["type"].get<std::string>() : std::string("BPE");
    AQPIM_CHECK(type == "BPE", "{}: model type '{}' is not supported (expected BPE)", path, type);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        AQPIM_CHECK(!model.contains(key) || model[key].is_null() || model[key] == "",
                    "{}: model.{} is not supported", path, key);
    }

    // ---- tokens: model.vocab plus added_tokens, dense ids ----
    AQPIM_CHECK(model.contains("vocab") && model["vocab"].is_object(), "{}: model has no 'vocab' object", path);
    std::map<std::int64_t, std::string> by_id;
    std::map<std::int64_t, bool> added_special;  // id -> "special" of an added token
    auto put = [&](std::int64_t id, const std::string& text, const char* where) {
        AQPIM_CHECK(id >= 0 && id < (1 << 24), "{}: {} token '{}' has id {} (expected 0..2^24)", path, where, text, id);
        auto [it, fresh] = by_id.emplace(id, text);
        AQPIM_CHECK(fresh || it->second == text, "{}: id {} is both '{}' and '{}'", path, id, it->second, text);
    };
    for (const auto& [text, id] : model["vocab"].items()) {
        AQPIM_CHECK(id.is_number_integer(), "{}: vocab entry '{}' has a non-integer id", path, text);
        put(id.get<std::int64_t>(), text, "vocab");
    }
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
        AQPIM_CHECK(j["added_tokens"].is_array(), "{}: added_tokens is not an array", path);
        for (const auto& a : j["added_tokens"]) {
            AQPIM_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                            a["content"].is_string(),
                        "{}: an added_tokens entry lacks an integer id or a string content", path);
            const auto id = a["id"].get<std::int64_t>();
            put(id, a["content"].get<std::string>(), "added");
            added_special[id] = a.value("special", true);
        }
    }
    AQPIM_CHECK(!by_id.empty(), "{}: empty vocabulary", path);
    const auto n = std::size_t(by_id.rbegin()->first + 1);
    AQPIM_CHECK(by_id.size() == n, "{}: token ids are not dense (0..{} with {} tokens)", path, n - 1, by_id.size());

    VocabData v;
    v.tokens.reserve(n);
    for (auto& [id, text] : by_id) v.tokens.push_back(std::move(text));
    std::unordered_map<std::string, std::int32_t> index;
    for (std::size_t i = 0; i < n; ++i) index[v.tokens[i]] = std::int32_t(i);
    auto id_of = [&](const std::string& text) -> std::int32_t {
        const auto it = index.find(text);
        return it == index.end() ? -1 : it->second;
    };

    // ---- kind: byte-level or SentencePiece-style ----
    const auto pre = flatten(j.value("pre_tokenizer", json()), "pretokenizers");
    const auto norm = flatten(j.value("normalizer", json()), "normalizers");
    bool byte_level = false;
    for (const auto& p : pre) byte_level |= p.is_object() && p.value("type", "") == "ByteLevel";

    if (byte_level) {
        v.kind = VocabKind::bpe;
        v.add_space_prefix = false;
        std::vector<std::string> regexes;
        for (const auto& p : pre) {
            const std::string t = p.is_object() ? p.value("type", "") : "";
            if (t == "ByteLevel") {
                if (p.value("add_prefix_space", false)) v.add_space_prefix = true;
                if (p.value("use_regex", true)) regexes.push_back(tok::hf_pre_tokenizer_pattern("gpt2"));
            } else if (t == "Split") {
                const auto [is_regex, pattern] = pattern_of(p, path, "Split pre-tokenizer");
                AQPIM_CHECK(p.value("behavior", "") == "Isolated" && !p.value("invert", false),
                            "{}: Split pre-tokenizer with behavior '{}' / invert is not supported (expected Isolated)",
                            path, p.value("behavior", ""));
                regexes.push_back(is_regex ? pattern : "\\Q" + pattern + "\\E");
            } else {
                AQPIM_FAIL("{}: pre-tokenizer '{}' is not supported with ByteLevel", path, t);
            }
        }
        AQPIM_CHECK(regexes.size() <= 1, "{}: {} pre-tokenizer regexes (at most one is supported)", path,
                    regexes.size());
        if (regexes.empty()) {
            v.pre_regex = "[\\s\\S]+";  // no regex: the whole fragment is one word
        } else {
            v.pre_tokenizer.clear();
            for (const char* name : {"gpt2", "llama3", "qwen2"}) {
                if (regexes[0] == tok::hf_pre_tokenizer_pattern(name)) v.pre_tokenizer = name;
            }
            if (v.pre_tokenizer.empty()) {
                v.pre_tokenizer = "default";
                v.pre_regex = regexes[0];
            }
        }
        for (const auto& nz : norm) {
            AQPIM_FAIL("{}: normalizer '{}' is not supported with ByteLevel", path,
                       nz.is_object() ? nz.value("type", "") : json_excerpt(nz));
        }
        v.ignore_merges = model.value("ignore_merges", false);
    } else {
        v.kind = VocabKind::spm;
        bool escapes = false, prefix = false;
        for (const auto& nz : norm) {
            const std::string t = nz.is_object() ? nz.value("type", "") : "";
            if (t == "Prepend") {
                AQPIM_CHECK(string_field(nz, "prepend", path, "Prepend normalizer") == kSpaceEscape,
                            "{}: Prepend normalizer prepends something other than \"▁\"", path);
                prefix = true;
            } else if (t == "Replace") {
                const auto [is_regex, pattern] = pattern_of(nz, path, "Replace normalizer");
                AQPIM_CHECK(!is_regex && pattern == " " &&
                                string_field(nz, "content", path, "Replace normalizer") == kSpaceEscape,
                            "{}: only the Replace \" \" -> \"▁\" normalizer is supported", path);
                escapes = true;
            } else {
                AQPIM_FAIL("{}: normalizer '{}' is not supported", path, t.empty() ? json_excerpt(nz) : t);
            }
        }
        for (const auto& p : pre) {
            const std::string t = p.is_object() ? p.value("type", "") : "";
            AQPIM_CHECK(t == "Metaspace", "{}: pre-tokenizer '{}' is not supported without ByteLevel", path, t);
            AQPIM_CHECK(string_field(p, "replacement", path, "Metaspace") == kSpaceEscape && !p.value("split", false),
                        "{}: only a non-splitting Metaspace with replacement \"▁\" is supported", path);
            escapes = true;
            prefix = p.contains("prepend_scheme") ? p.value("prepend_scheme", "always") != "never"
                                                  : p.value("add_prefix_space", true);
        }
        AQPIM_CHECK(escapes, "{}: neither a ByteLevel pre-tokenizer nor the \" \" -> \"▁\" normalizer: not a "
                             "supported tokenizer", path);
        v.add_space_prefix = prefix;
    }

    // ---- merges, rank order ----
    AQPIM_CHECK(model.contains("merges") && model["merges"].is_array(), "{}: model has no 'merges' array", path);
    const json& merges = model["merges"];
    v.merges.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
        const json& m = merges[r];
        std::string left, right;
        if (m.is_string()) {
            const std::string s = m.get<std::string>();
            const std::size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
            AQPIM_CHECK(sp != std::string::npos, "{}: merge {} '{}' is not 'left right'", path, r, s);
            left = s.substr(0, sp), right = s.substr(sp + 1);
        } else {
            AQPIM_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                        "{}: merge {} is neither 'left right' nor [left, right]", path, r);
            left = m[0].get<std::string>(), right = m[1].get<std::string>();
            AQPIM_CHECK(!left.empty() && left.find(' ', 1) == std::string::npos && right.find(' ') == std::string::npos,
                        "{}: merge {} has a token with a space, which is not supported", path, r);
        }
        AQPIM_CHECK(id_of(left) >= 0 && id_of(right) >= 0 && id_of(left + right) >= 0,
                    "{}: merge {} '{} {}' refers to a text that is not a token", path, r, left, right);
        v.merges.push_back(left + " " + right);
    }

    // ---- types, scores ----
    v.types.assign(n, TokenType::normal);
    for (std::size_t i = 0; i < n; ++i) {
        if (v.kind == VocabKind::spm) v.types[i] = tok::guess_type(v.tokens[i]);
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        v.unk = id_of(model["unk_token"].get<std::string>());
        AQPIM_CHECK(v.unk >= 0, "{}: unk_token '{}' is not a token", path, model["unk_token"].get<std::string>());
    }
    for (const auto& [id, special] : added_special) {
        v.types[std::size_t(id)] = special ? TokenType::control : TokenType::user_defined;
    }
    if (v.unk >= 0) v.types[std::size_t(v.unk)] = TokenType::unknown;
    if (v.kind == VocabKind::spm) {
        // Only informative (the tokenizer merges by rank): -rank for a merge's product, below every
        // merge for the rest, so that llama.cpp's score-driven SPM approximates the ranks.
        v.scores.assign(n, -float(merges.size()));
        for (std::size_t r = v.merges.size(); r-- > 0;) {
            const std::string& m = v.merges[r];
            const std::size_t sp = m.find(' ', 1);
            v.scores[std::size_t(id_of(m.substr(0, sp) + m.substr(sp + 1)))] = -float(r);
        }
    }

    // ---- BOS / EOS / PAD and flags: tokenizer_config.json, else the post-processor ----
    v.add_bos = false;
    v.add_eos = false;
    const json post = j.value("post_processor", json());
    if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") &&
        post["single"].is_array()) {
        const json& single = post["single"];
        for (std::size_t k = 0; k < single.size(); ++k) {
            if (!single[k].is_object() || !single[k].contains("SpecialToken")) continue;
            const std::int32_t id = id_of(single[k]["SpecialToken"].value("id", ""));
            AQPIM_CHECK(id >= 0, "{}: post-processor special token is not a token", path);
            if (k == 0) {
                v.bos = id, v.add_bos = true;
            } else if (k + 1 == single.size()) {
                v.eos = id, v.add_eos = true;
            }
        }
    }
    if (v.kind == VocabKind::spm) {
        if (v.bos < 0) v.bos = id_of("<s>");
        if (v.eos < 0) v.eos = id_of("</s>");
    }
    if (const auto cfg = tok::read_config_beside(path)) {
        const std::string cfg_path = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
        for (const auto& [key, id] : {std::pair{"bos_token", &v.bos}, std::pair{"eos_token", &v.eos},
                                      std::pair{"pad_token", &v.pad}, std::pair{"unk_token", &v.unk}}) {
            if (const auto text = config_token(*cfg, key, cfg_path)) {
                *id = id_of(*text);
                AQPIM_CHECK(*id >= 0, "{}: {} '{}' is not a token", cfg_path, key, *text);
            }
        }
        tok::apply_config_flags(*cfg, cfg_path, v);
    }
    AQPIM_CHECK(!v.add_bos || v.bos >= 0, "{}: BOS is to be added but there is no BOS token", path);
    AQPIM_CHECK(!v.add_eos || v.eos >= 0, "{}: EOS is to be added but there is no EOS token", path);
    return v;
}

}  // namespace

VocabData vocab_from_hf_tokenizer_json(const std::string& path) {
    const json j = tok::read_json_file(path);
    try {
        return parse_tokenizer_json(j, path);
    } catch (const json::exception& e) {  // a field of an unexpected JSON type
        AQPIM_FAIL("{}: unexpected tokenizer.json structure: {}", path, e.what());
    }
}

}  // namespace aqpim
