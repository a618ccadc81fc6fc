// Byte-level BPE (llama.cpp's LLAMA_VOCAB_TYPE_BPE, "gpt2"; Hugging Face ByteLevel):
//   1. the pre-tokenizer regexes cut the fragment into words;
//   2. each word's bytes are mapped to GPT-2's printable code points (byte_to_unicode);
//   3. one symbol per mapped character; repeatedly merge the adjacent pair with the lowest merge
//      rank (left-most on ties); with ignore_merges (Llama 3) a word that is a token is taken whole;
//   4. tokens are emitted per final symbol (a character that is not a token: its byte's <0xXX>
//      token, else UNK).
// Decoding maps the code points back to bytes.

#include <algorithm>
#include <array>
#include <limits>
#include <optional>

#include "aqpim/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace aqpim::tok {

namespace {

std::vector<std::string> regexes_of(const VocabData& v) {
    if (!v.pre_regex.empty()) return {v.pre_regex};
    return pre_tokenizer_regexes(v.pre_tokenizer);
}

class BpeTokenizer final : public TokenizerBase {
public:
    explicit BpeTokenizer(VocabData v) : TokenizerBase(std::move(v)), pre_(regexes_of(vocab_)) {
        build_merge_table(merges_);
        ignore_merges_ = vocab_.ignore_merges;
        for (int b = 0; b < 256; ++b) {
            std::int32_t id = find(unicode::byte_to_unicode(std::uint8_t(b)));
            if (id < 0) id = find(unicode::byte_token_text(std::uint8_t(b)));
            byte_ids_[std::size_t(b)] = id >= 0 ? id : vocab_.unk;
        }
        build_pieces();
    }

protected:
    void encode_fragment(std::string_view text, std::vector<std::int32_t>& out) const override {
        std::string word;
        std::vector<MergeCandidate> heap;
        for (const auto& [start, len] : pre_.split(text)) {
            word.clear();
            for (std::size_t i = start; i < start + len; ++i) {
                word += unicode::byte_to_unicode(static_cast<unsigned char>(text[i]));
            }
            AQPIM_CHECK(word.size() < 0x7FFFFFFFu, "tokenizer: a word of {} bytes is too long", word.size());
            const std::string_view wv(word);
            if (ignore_merges_) {
                const std::int32_t id = find(wv);
                if (id >= 0) {
                    out.push_back(id);
                    continue;
                }
            }
            auto syms = split_chars(wv, [&](std::size_t off, std::size_t n) { return find(wv.substr(off, n)); });
            merge_symbols(syms, 0, syms.size(), heap, [&](const MergeSymbol& l, const MergeSymbol& r, std::uint32_t& level, std::int32_t& id) {
                if (l.id < 0 || r.id < 0) return false;
                const auto it = merges_.find(merge_key(l.id, r.id));
                if (it == merges_.end()) return false;
                level = std::uint32_t(std::numeric_limits<std::int32_t>::max() - it->second.rank);
                id = it->second.result;
                return true;
            });
            if (syms.empty()) continue;
            for (std::int32_t i = 0; i != -1; i = syms[std::size_t(i)].next) {
                const MergeSymbol& sym = syms[std::size_t(i)];
                if (sym.id >= 0) {
                    out.push_back(sym.id);
                    continue;
                }
                // Not a token: only a single mapped character can be left unmerged like this.
                std::size_t pos = sym.start;
                while (pos < sym.start + sym.n) {
                    const std::uint32_t cp = unicode::next_codepoint(wv, pos);
                    const int b = unicode::unicode_to_byte(cp);
                    const std::int32_t id = b >= 0 ? byte_ids_[std::size_t(b)] : vocab_.unk;
                    AQPIM_CHECK(id >= 0, "tokenizer: byte-level character U+{:04X} has no token and there is no UNK",
                                cp);
                    out.push_back(id);
                }
            }
        }
    }

    std::string render_text(const std::string& text) const override {
        // Byte-level text back to bytes; a code point outside the map is kept as its UTF-8.
        std::string out;
        std::size_t pos = 0;
        while (pos < text.size()) {
            const std::size_t at = pos;
            const int b = unicode::unicode_to_byte(unicode::next_codepoint(text, pos));
            if (b >= 0) {
                out.push_back(char(b));
            } else {
                out.append(text, at, pos - at);
            }
        }
        return out;
    }

private:
    PreTokenizer pre_;
    MergeTable merges_;
    bool ignore_merges_ = false;
    std::array<std::int32_t, 256> byte_ids_;  ///< byte -> the token of its mapped character (or UNK, or -1)
};

}  // namespace

std::shared_ptr<const Tokenizer> make_bpe_tokenizer(VocabData vocab) {
    return std::make_shared<BpeTokenizer>(std::move(vocab));
}

}  // namespace aqpim::tok
