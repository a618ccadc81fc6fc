#pragma once
// Small file helpers shared by the vocabulary readers.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "aqpim/tokenizer.h"

namespace aqpim::tok {

/// Parse a JSON file; aqpim::Error naming the path on a read or syntax error.
nlohmann::json read_json_file(const std::string& path);
/// tokenizer_config.json in the directory of `path`, if there is one (parsed), else nullopt.
std::optional<nlohmann::json> read_config_beside(const std::string& path);
/// Apply add_bos_token / add_eos_token and a string chat_template of a Hugging Face
/// tokenizer_config.json when present.
void apply_config_flags(const nlohmann::json& config, const std::string& config_path, VocabData& vocab);
/// llama.cpp's converter for a SentencePiece model: each entry of tokenizer_config.json's
/// added_tokens_decoder ({"id": {"content", "special"}}) inside the vocabulary replaces that token's
/// text, makes it control (special) or user-defined (with "▁" written as a space), score -1000.
void apply_added_tokens_decoder(const nlohmann::json& config, const std::string& config_path, VocabData& vocab);
/// Type of a token text in a SentencePiece-style vocabulary without explicit types: <0xXX> -> byte.
TokenType guess_type(const std::string& text);

}  // namespace aqpim::tok
