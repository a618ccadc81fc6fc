#include "tokenizer/vocab_io.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "tokenizer/unicode.h"

namespace aqpim::tok {

nlohmann::json read_json_file(const std::string& path) { return parse_json(read_whole_file(path, "tokenizer file"), path); }

std::optional<nlohmann::json> read_config_beside(const std::string& path) {
    const auto cfg = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(cfg, ec)) return std::nullopt;
    auto j = read_json_file(cfg.string());
    AQPIM_CHECK(j.is_object(), "{}: expected a JSON object", cfg.string());
    return j;
}

void apply_config_flags(const nlohmann::json& config, const std::string& config_path, VocabData& vocab) {
    for (const auto& [key, flag] : {std::pair{"add_bos_token", &vocab.add_bos}, std::pair{"add_eos_token", &vocab.add_eos}}) {
        if (!config.contains(key) || config[key].is_null()) continue;
        AQPIM_CHECK(config[key].is_boolean(), "{}: '{}' is not a boolean", config_path, key);
        *flag = config[key].get<bool>();
    }
    // A string template (a list of named templates, as some models ship, is not one we recognise).
    if (config.contains("chat_template") && config["chat_template"].is_string())
        vocab.chat_template = config["chat_template"].get<std::string>();
}

void apply_added_tokens_decoder(const nlohmann::json& config, const std::string& config_path, VocabData& vocab) {
    if (!config.contains("added_tokens_decoder") || config["added_tokens_decoder"].is_null()) return;
    const auto& added = config["added_tokens_decoder"];
    AQPIM_CHECK(added.is_object(), "{}: added_tokens_decoder is not an object", config_path);
    for (const auto& [key, entry] : added.items()) {
        std::size_t used = 0;
        long long id = -1;
        try {
            id = std::stoll(key, &used);
        } catch (const std::exception&) {
        }
        AQPIM_CHECK(used == key.size() && id >= 0, "{}: added_tokens_decoder key '{}' is not a token id", config_path,
                    key);
        AQPIM_CHECK(entry.is_object() && entry.contains("content") && entry["content"].is_string(),
                    "{}: added_tokens_decoder[{}] has no string content", config_path, key);
        if (std::size_t(id) >= vocab.tokens.size()) continue;  // beyond the model's pieces: ignored, as the converter
        std::string content = entry["content"].get<std::string>();
        const bool special = entry.contains("special") && entry["special"].is_boolean() && entry["special"].get<bool>();
        if (!special) content = unicode::unescape_whitespace(content);
        vocab.tokens[std::size_t(id)] = std::move(content);
        vocab.types[std::size_t(id)] = special ? TokenType::control : TokenType::user_defined;
        vocab.scores[std::size_t(id)] = -1000.0f;
    }
}

TokenType guess_type(const std::string& text) {
    return unicode::parse_byte_token(text) >= 0 ? TokenType::byte : TokenType::normal;
}

}  // namespace aqpim::tok
