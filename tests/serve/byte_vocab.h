#pragma once
// A byte-level vocabulary for the server's text tests: every byte is a token, so a text of any
// bytes can be generated token by token.

#include <fmt/format.h>

#include <string>
#include <vector>

#include "aqpim/tokenizer.h"
#include "serve/engine.h"

namespace aqpim::test {

/// <unk> <s> </s>, the 256 byte tokens (ids 3..258), then a few pieces.
/// `control`: more control tokens after those (ids 265 on).
inline VocabData byte_vocab(const std::vector<std::string>& control = {}) {
    VocabData v;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {TokenType::unknown, TokenType::control, TokenType::control};
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(fmt::format("<0x{:02X}>", b));
        v.types.push_back(TokenType::byte);
    }
    for (const char* p : {"\xe2\x96\x81hello", "\xe2\x96\x81wor", "ld", "ab", "c", "END"}) {
        v.tokens.push_back(p);
        v.types.push_back(TokenType::normal);
    }
    for (const std::string& c : control) {
        v.tokens.push_back(c);
        v.types.push_back(TokenType::control);
    }
    v.scores.assign(v.tokens.size(), 0.0f);
    v.unk = 0, v.bos = 1, v.eos = 2;
    return v;
}
inline std::shared_ptr<const Tokenizer> byte_tokenizer() { return Tokenizer::create(byte_vocab()); }
constexpr std::int32_t kHello = 259, kWor = 260, kLd = 261, kAb = 262, kC = 263, kEnd = 264;
inline std::int32_t byte_id(unsigned char b) { return 3 + b; }

inline serve::TokenEvent ev(std::int32_t token, float lp = -0.5f) {
    serve::TokenEvent e;
    e.token = token;
    e.logprob = lp;
    return e;
}

}  // namespace aqpim::test
