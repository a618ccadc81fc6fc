// SentencePiece-style BPE (llama.cpp's LLAMA_VOCAB_TYPE_SPM, llm_tokenizer_spm_session):
//   1. spaces become "▁" (the dummy prefix space, if due, was added by the caller);
//   2. one symbol per UTF-8 character;
//   3. repeatedly merge the adjacent pair whose concatenation is the token with the highest score
//      (left-most on ties) — or, for vocabularies that come with merges (HF tokenizer.json BPE), the
//      pair with the lowest merge rank, as Hugging Face's BPE model does;
//   4. a final symbol that is not a token is emitted as its bytes' <0xXX> tokens (byte fallback),
//      or as one UNK if the vocabulary lacks one of them.
// llama.cpp runs one symbol chain over the whole fragment (no split into words); so do we, cut only
// where no merge can cross (see encode_fragment): same result, O(n log n).

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>
#include <limits>

#include "aqpim/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace aqpim::tok {

namespace {

class SpmTokenizer final : public TokenizerBase {
public:
    explicit SpmTokenizer(VocabData v) : TokenizerBase(std::move(v)) {
        if (!vocab_.merges.empty()) build_merge_table(merges_);
        // Scores as dense levels (equal scores, equal levels) for the merge queue's integer keys.
        std::vector<float> distinct(vocab_.scores);
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        score_level_.resize(vocab_.scores.size());
        for (std::size_t i = 0; i < vocab_.scores.size(); ++i) {
            score_level_[i] = std::uint32_t(std::lower_bound(distinct.begin(), distinct.end(), vocab_.scores[i]) -
                                            distinct.begin());
        }
        for (const auto& t : vocab_.tokens) {
            max_token_bytes_ = std::max(max_token_bytes_, t.size());
            const auto chars = split_chars(t, [](std::size_t, std::size_t) { return -1; });
            for (std::size_t i = 0; i + 1 < chars.size(); ++i) token_pairs_.insert(char_pair(t, chars[i], chars[i + 1]));
        }
        for (int b = 0; b < 256; ++b) {
            std::int32_t id = find(unicode::byte_token_text(std::uint8_t(b)));
            if (id < 0) id = find(std::string(1, char(b)));
            byte_ids_[std::size_t(b)] = id;
        }
        build_pieces();
    }

protected:
    void encode_fragment(std::string_view text, std::vector<std::int32_t>& out) const override {
        const std::string s = unicode::escape_whitespace(text);
        AQPIM_CHECK(s.size() < 0x7FFFFFFFu, "tokenizer: a text fragment of {} bytes is too long", s.size());
        const std::string_view sv(s);
        auto syms = split_chars(sv, [&](std::size_t off, std::size_t len) { return find(sv.substr(off, len)); });
        // Cut the chain where no token holds the two characters side by side: no merge can cross such a
        // boundary (every merged symbol is a token), so the pieces merge independently and give the
        // same result as one queue over the whole text, with small, cache-resident queues.
        std::vector<MergeCandidate> heap;
        std::size_t begin = 0;
        for (std::size_t i = 0; i < syms.size(); ++i) {
            const bool last = i + 1 == syms.size();
            if (!last && token_pairs_.count(char_pair(sv, syms[i], syms[i + 1])) != 0) continue;
            if (!last) {
                syms[i].next = -1;
                syms[i + 1].prev = -1;
            }
            merge_segment(sv, syms, begin, i + 1, heap);
            emit_segment(sv, syms, begin, out);
            begin = i + 1;
        }
    }

    std::string render_text(const std::string& text) const override { return unicode::unescape_whitespace(text); }

private:
    /// The bytes of two adjacent characters (each at most 4 bytes) packed into one key.
    static std::uint64_t char_pair(std::string_view s, const MergeSymbol& a, const MergeSymbol& b) {
        std::uint64_t k = 0;
        std::memcpy(&k, s.data() + a.start, a.n);
        std::uint64_t k2 = 0;
        std::memcpy(&k2, s.data() + b.start, b.n);
        return k | (k2 << 32);
    }

    void merge_segment(std::string_view sv, std::vector<MergeSymbol>& syms, std::size_t begin, std::size_t end,
                       std::vector<MergeCandidate>& heap) const {
        if (merges_.empty()) {
            merge_symbols(syms, begin, end, heap,
                          [&](const MergeSymbol& l, const MergeSymbol& r, std::uint32_t& level, std::int32_t& id) {
                              if (l.n + r.n > max_token_bytes_) return false;
                              id = find(sv.substr(l.start, l.n + r.n));
                              if (id < 0) return false;
                              level = score_level_[std::size_t(id)];
                              return true;
                          });
        } else {
            merge_symbols(syms, begin, end, heap,
                          [&](const MergeSymbol& l, const MergeSymbol& r, std::uint32_t& level, std::int32_t& id) {
                              if (l.id < 0 || r.id < 0) return false;
                              const auto it = merges_.find(merge_key(l.id, r.id));
                              if (it == merges_.end()) return false;
                              level = std::uint32_t(std::numeric_limits<std::int32_t>::max() - it->second.rank);
                              id = it->second.result;
                              return true;
                          });
        }
    }

    /// Tokens of the merged chain starting at syms[begin]: a symbol that is not a token becomes the
    /// <0xXX> tokens of its bytes, or one UNK if one of them is missing (as Hugging Face's
    /// byte_fallback; llama.cpp would fail).
    void emit_segment(std::string_view sv, const std::vector<MergeSymbol>& syms, std::size_t begin,
                      std::vector<std::int32_t>& out) const {
        for (auto i = std::int32_t(begin); i != -1; i = syms[std::size_t(i)].next) {
            const MergeSymbol& sym = syms[std::size_t(i)];
            if (sym.id >= 0) {
                out.push_back(sym.id);
                continue;
            }
            bool all_bytes = true;
            for (std::uint32_t j = 0; j < sym.n; ++j) all_bytes &= byte_ids_[static_cast<unsigned char>(sv[sym.start + j])] >= 0;
            if (all_bytes) {
                for (std::uint32_t j = 0; j < sym.n; ++j) out.push_back(byte_ids_[static_cast<unsigned char>(sv[sym.start + j])]);
                continue;
            }
            AQPIM_CHECK(vocab_.unk >= 0, "tokenizer: '{}' is not in the vocabulary, which has neither its byte tokens "
                        "nor UNK", sv.substr(sym.start, sym.n));
            out.push_back(vocab_.unk);
        }
    }

    std::unordered_set<std::uint64_t> token_pairs_;  ///< char_pair of every two adjacent characters in a token
    MergeTable merges_;                       ///< empty: merge by score
    std::vector<std::uint32_t> score_level_;  ///< [n_vocab] rank of the token's score among all scores
    std::size_t max_token_bytes_ = 0;
    std::array<std::int32_t, 256> byte_ids_;  ///< byte -> its <0xXX> (or one-byte) token, or -1
};

}  // namespace

std::shared_ptr<const Tokenizer> make_spm_tokenizer(VocabData vocab) {
    return std::make_shared<SpmTokenizer>(std::move(vocab));
}

}  // namespace aqpim::tok
