// llama2.c tokenizer.bin: i32 max_token_length, then per token: f32 score, i32 len, len bytes (no
// terminator). Ids 0, 1, 2 are <unk>, <s>, </s> (stored as "<unk>", "\n<s>\n", "\n</s>\n"); the byte
// tokens "<0x00>".."<0xFF>" follow at 3..258. Converted as llama.cpp's convert-llama2c-to-ggml does,
// so that the SPM tokenizer reproduces llama2.c's encoder: 0/1/2 renamed and typed unknown/control,
// empty texts control, <0xXX> byte, spaces escaped to "▁".

#include <cstring>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_io.h"

namespace aqpim {

VocabData vocab_from_llama2c(const std::string& tokenizer_bin, int n_vocab) {
    AQPIM_CHECK(n_vocab >= 3 && n_vocab <= (1 << 24), "{}: n_vocab {} is out of range [3, 2^24]", tokenizer_bin,
                n_vocab);
    const std::string bytes = read_whole_file(tokenizer_bin, "tokenizer");
    std::size_t off = 0;
    auto read_i32 = [&](const char* what, int i) {
        AQPIM_CHECK(bytes.size() - off >= 4, "{}: truncated at byte {} reading the {} of token {}", tokenizer_bin, off,
                    what, i);
        std::int32_t v;
        std::memcpy(&v, bytes.data() + off, 4);
        off += 4;
        return v;
    };
    const std::int32_t max_len = read_i32("max_token_length", -1);
    AQPIM_CHECK(max_len >= 1 && max_len <= (1 << 16), "{}: max_token_length {} is out of range [1, 65536]",
                tokenizer_bin, max_len);

    VocabData v;
    v.kind = VocabKind::spm;
    v.tokens.reserve(std::size_t(n_vocab));
    v.scores.reserve(std::size_t(n_vocab));
    v.types.reserve(std::size_t(n_vocab));
    for (int i = 0; i < n_vocab; ++i) {
        const std::int32_t score_bits = read_i32("score", i);
        float score;
        std::memcpy(&score, &score_bits, 4);
        AQPIM_CHECK(score == score, "{}: token {} has a NaN score", tokenizer_bin, i);
        const std::int32_t len = read_i32("length", i);
        AQPIM_CHECK(len >= 0 && len <= max_len, "{}: token {} has length {} (max_token_length {})", tokenizer_bin, i,
                    len, max_len);
        AQPIM_CHECK(bytes.size() - off >= std::size_t(len), "{}: truncated in the text of token {} ({} bytes at {})",
                    tokenizer_bin, i, len, off);
        std::string text = bytes.substr(off, std::size_t(len));
        off += std::size_t(len);

        TokenType type = TokenType::normal;
        if (i == 0) {
            text = "<unk>", type = TokenType::unknown;
        } else if (i == 1) {
            text = "<s>", type = TokenType::control;
        } else if (i == 2) {
            text = "</s>", type = TokenType::control;
        } else if (text.empty()) {
            type = TokenType::control;
        } else if (unicode::parse_byte_token(text) >= 0) {
            type = TokenType::byte;
        }
        v.tokens.push_back(unicode::escape_whitespace(text));
        v.scores.push_back(score);
        v.types.push_back(type);
    }
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    v.add_bos = true;
    v.add_eos = false;
    v.add_space_prefix = true;
    return v;
}

}  // namespace aqpim
