#pragma once
// Tokenizers of the Llama family, built from a neutral description of a vocabulary (VocabData)
// that every model format converts into:
//   - spm: SentencePiece-style (llama.cpp "llama" vocab, llama2.c tokenizer.bin, HF tokenizer.json
//     BPE with the "▁" normalizer and byte fallback, SentencePiece tokenizer.model): score-driven
//     merges, dummy-prefix space, <0xXX> byte fallback;
//   - bpe: byte-level BPE (llama.cpp "gpt2" vocab, HF tokenizer.json ByteLevel): pre-tokenizer
//     regexes (gpt2, llama3, qwen2), byte-to-unicode mapping, rank-ordered merges.
// Special tokens written in the text (the texts of control, user-defined and unknown tokens, e.g.
// "<s>") are matched as tokens first, as llama.cpp's tokenizer does with parse_special = true; the
// dummy prefix space goes before the first text fragment and before each fragment that follows a
// special token. docs/tokenizers.md gives the exact rules and what is tested against what.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace aqpim {

class GgufFile;
class GgufWriter;

enum class VocabKind { spm, bpe };
/// llama.cpp token types (GGUF tokenizer.ggml.token_type).
enum class TokenType : std::int32_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct VocabData {
    VocabKind kind = VocabKind::spm;
    std::vector<std::string> tokens;   ///< token text (spm: with "▁" for spaces; bpe: byte-to-unicode form)
    std::vector<float> scores;         ///< spm merge priority (higher first); empty for bpe
    std::vector<TokenType> types;
    /// "left right", rank order. bpe: the merges. spm: empty (merge by score), or merges by rank
    /// (Hugging Face tokenizer.json BPE, merged as HF does; scores then only mirror the ranks).
    std::vector<std::string> merges;
    std::string pre_tokenizer = "default";  ///< bpe regex set (tokenizer.ggml.pre): default, gpt2, llama3, qwen2
    std::string pre_regex;             ///< bpe: a custom pre-tokenizer regex (HF Split) used instead when not empty
    bool ignore_merges = false;        ///< bpe: a word that is a token is taken whole (Llama 3)
    std::int32_t bos = -1, eos = -1, unk = -1, pad = -1;
    bool add_bos = true;
    bool add_eos = false;
    bool add_space_prefix = true;      ///< spm dummy prefix
    /// The model's chat template (GGUF tokenizer.chat_template, tokenizer_config.json chat_template):
    /// Jinja text, recognised but never executed (src/serve/chat_template.h); empty if none.
    std::string chat_template;
};

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    static std::shared_ptr<const Tokenizer> create(VocabData vocab);

    const VocabData& vocab() const { return vocab_; }
    int n_vocab() const { return static_cast<int>(vocab_.tokens.size()); }
    std::int32_t bos() const { return vocab_.bos; }
    std::int32_t eos() const { return vocab_.eos; }

    /// Token ids of `text` (llama.cpp's llama_tokenize with add_special = add_bos, parse_special =
    /// true): when add_bos, BOS first if the vocabulary's add_bos and EOS last if its add_eos.
    virtual std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const = 0;
    /// Text of one token as it should be printed after `prev` (-1: at the start). Byte tokens give
    /// their raw byte; control, unknown and unused tokens give "". With add_space_prefix, a leading
    /// space is dropped at the start and after BOS, control and user-defined tokens (llama2.c drops
    /// it after BOS). Throws aqpim::Error if id is out of range.
    virtual std::string piece(std::int32_t prev, std::int32_t id) const = 0;
    /// Text of a sequence: piece(prev, id) concatenated, so decode(encode(t)) == t for text without
    /// special-token texts, unknown characters or (HF) normalisation beyond the "▁" escape.
    std::string decode(const std::vector<std::int32_t>& ids) const;

protected:
    explicit Tokenizer(VocabData vocab) : vocab_(std::move(vocab)) {}
    VocabData vocab_;
};

// Sources of vocabularies. Each validates what it reads (counts, lengths, ids) and throws
// aqpim::Error naming the field.
VocabData vocab_from_gguf(const GgufFile& gguf);                                   ///< tokenizer.ggml.*
VocabData vocab_from_llama2c(const std::string& tokenizer_bin, int n_vocab);       ///< llama2.c tokenizer.bin
VocabData vocab_from_hf_tokenizer_json(const std::string& path);                    ///< tokenizer.json (+ config beside it)
VocabData vocab_from_sentencepiece_model(const std::string& path);                  ///< tokenizer.model (protobuf)
/// Write tokenizer.ggml.* keys as llama.cpp's converter does.
void write_vocab_gguf(GgufWriter& writer, const VocabData& vocab);

}  // namespace aqpim
