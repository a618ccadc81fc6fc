#pragma once
// Internals shared by the two tokenizer kinds: validation of a VocabData, the token-text index,
// the special-token partition of the input, the per-token piece cache, and the bigram merge queue
// that both SentencePiece-style and byte-level BPE run (llama.cpp's llm_tokenizer_spm_session and
// llm_tokenizer_bpe_session share the same loop; only the priority of a pair differs).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aqpim/tokenizer.h"
#include "tokenizer/unicode.h"

namespace aqpim::tok {

/// Token text -> id: open addressing over views of VocabData::tokens (which never change after
/// construction); the encoder's hottest lookup. When two tokens share a text the higher id wins, as
/// in llama.cpp's token_to_id.
class TokenIndex {
public:
    void build(const std::vector<std::string>& tokens);
    std::int32_t find(std::string_view text) const {
        const std::uint64_t h = hash(text);
        const auto tag = std::uint32_t(h >> 32);
        for (std::size_t i = std::size_t(h) & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.id < 0) return -1;
            if (s.tag == tag && (*tokens_)[std::size_t(s.id)] == text) return s.id;
        }
    }
    static std::uint64_t hash(std::string_view s) {
        std::uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
        const char* p = s.data();
        std::size_t n = s.size();
        for (; n >= 8; p += 8, n -= 8) {
            std::uint64_t w;
            std::memcpy(&w, p, 8);
            h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
            h ^= h >> 31;
        }
        std::uint64_t w = 0;
        std::memcpy(&w, p, n);
        h = (h ^ w) * 0x94D049BB133111EBull;
        return h ^ (h >> 29);
    }

private:
    struct Slot {
        std::uint32_t tag;
        std::int32_t id;  ///< -1: empty
    };
    const std::vector<std::string>* tokens_ = nullptr;
    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
};

/// Merges by rank: key (left id << 32 | right id) -> rank (position in VocabData::merges) and the
/// id of the merged token. The first occurrence of a pair keeps its rank.
struct MergeRule {
    std::int32_t rank;
    std::int32_t result;
};
using MergeTable = std::unordered_map<std::uint64_t, MergeRule>;
inline std::uint64_t merge_key(std::int32_t left, std::int32_t right) {
    return (std::uint64_t(std::uint32_t(left)) << 32) | std::uint32_t(right);
}

// ---- the merge queue ---------------------------------------------------------------------------

/// One symbol of the text being merged: bytes [start, start + n) of the text, linked to its
/// neighbours; n == 0 once merged into its left neighbour. id: its token, or -1 if none.
struct MergeSymbol {
    std::int32_t prev, next;
    std::uint32_t start, n;
    std::int32_t id;
};

/// A candidate merge of a symbol with its right neighbour, 16 bytes (the queue of a 1 MB text holds
/// millions). key: merge level in the high 32 bits (higher first), ~left in the low 32 bits (so
/// that on equal levels the left-most comes first). size: bytes of the pair when queued (a stale
/// candidate has a different sum). id: the merged token.
struct MergeCandidate {
    std::uint64_t key;
    std::uint32_t size;
    std::int32_t id;
    bool operator<(const MergeCandidate& o) const { return key < o.key; }
};

/// Split text [0, size) into one symbol per UTF-8 character (llama.cpp's rule: the lead byte gives the
/// length, clamped to what is left). id_of(start, n) gives each symbol's token id or -1.
template <class IdOf>
std::vector<MergeSymbol> split_chars(std::string_view text, IdOf&& id_of);

/// Merge adjacent symbols of the chain syms[begin, end) (its first has prev -1, its last next -1)
/// while a candidate exists: pair(left, right, level, id) returns true if the two may merge, with the
/// merge's level (higher merges first; equal levels left-most first) and the merged token.
/// O(n log n) in the number of symbols (fewer than 2^31). heap: scratch space.
template <class PairFn>
void merge_symbols(std::vector<MergeSymbol>& syms, std::size_t begin, std::size_t end,
                   std::vector<MergeCandidate>& heap, PairFn&& pair);

// ---- the shared tokenizer base -----------------------------------------------------------------

class TokenizerBase : public Tokenizer {
public:
    std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const final;
    std::string piece(std::int32_t prev, std::int32_t id) const final;
    TokenizerBase(const TokenizerBase&) = delete;  // index_ views this object's vocabulary
    TokenizerBase& operator=(const TokenizerBase&) = delete;

protected:
    /// Validates vocab (sizes, ids, types, merges) and builds the index, special list and pieces.
    explicit TokenizerBase(VocabData vocab);

    /// Token ids of one text fragment (no special tokens in it); `text` already carries the dummy
    /// prefix space when one is due. Appends to out.
    virtual void encode_fragment(std::string_view text, std::vector<std::int32_t>& out) const = 0;
    /// Text of a normal token (or of a byte token whose text is not <0xXX>) as it prints: "▁" back
    /// to spaces (spm), byte-level characters back to bytes (bpe).
    virtual std::string render_text(const std::string& text) const = 0;
    /// Call at the end of the derived constructor (render_text is virtual).
    void build_pieces();

    std::int32_t find(std::string_view text) const { return index_.find(text); }
    TokenType type(std::int32_t id) const { return vocab_.types[std::size_t(id)]; }
    /// Parse VocabData::merges ("left right", split at the first space after position 0) into table.
    void build_merge_table(MergeTable& table) const;

private:
    struct Fragment {
        std::int32_t token;      ///< a special token, or -1 for text [off, off + len)
        std::size_t off, len;
    };
    /// llama.cpp's tokenizer_st_partition with parse_special = true.
    std::vector<Fragment> partition(std::string_view text) const;
    bool is_special(std::int32_t id) const;
    /// Text a token prints as (without the leading-space rule); "" for control/unknown/unused.
    std::string render(std::int32_t id) const;

    TokenIndex index_;
    std::vector<std::int32_t> specials_;  ///< control, user-defined and unknown tokens, longest text first
    std::vector<std::string> pieces_;     ///< [n_vocab] render(id)
};

/// SentencePiece-style BPE (kind spm): score-driven merges (or rank-driven when merges are given).
std::shared_ptr<const Tokenizer> make_spm_tokenizer(VocabData vocab);
/// Byte-level BPE (kind bpe).
std::shared_ptr<const Tokenizer> make_bpe_tokenizer(VocabData vocab);

// ---- template definitions ----------------------------------------------------------------------

template <class IdOf>
std::vector<MergeSymbol> split_chars(std::string_view text, IdOf&& id_of) {
    std::vector<MergeSymbol> syms;
    syms.reserve(text.size());
    std::size_t off = 0;
    while (off < text.size()) {
        const std::size_t len = std::min(unicode::utf8_len(static_cast<unsigned char>(text[off])), text.size() - off);
        const auto i = std::int32_t(syms.size());
        syms.push_back({i - 1, off + len == text.size() ? -1 : i + 1, std::uint32_t(off), std::uint32_t(len),
                        id_of(off, len)});
        off += len;
    }
    return syms;
}

template <class PairFn>
void merge_symbols(std::vector<MergeSymbol>& syms, std::size_t begin, std::size_t end,
                   std::vector<MergeCandidate>& heap, PairFn&& pair) {
    auto candidate = [&](std::int32_t l, MergeCandidate& c) {
        const MergeSymbol& left = syms[std::size_t(l)];
        if (left.next < 0) return false;
        const MergeSymbol& right = syms[std::size_t(left.next)];
        std::uint32_t level = 0;
        if (!pair(left, right, level, c.id)) return false;
        c.key = (std::uint64_t(level) << 32) | (0xFFFFFFFFu - std::uint32_t(l));
        c.size = left.n + right.n;
        return true;
    };
    heap.clear();
    for (std::size_t i = begin; i + 1 < end; ++i) {
        MergeCandidate c;
        if (candidate(std::int32_t(i), c)) heap.push_back(c);
    }
    std::make_heap(heap.begin(), heap.end());
    auto push = [&](std::int32_t l) {
        MergeCandidate c;
        if (l >= 0 && candidate(l, c)) {
            heap.push_back(c);
            std::push_heap(heap.begin(), heap.end());
        }
    };
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end());
        const MergeCandidate c = heap.back();
        heap.pop_back();
        const auto l = std::int32_t(0xFFFFFFFFu - std::uint32_t(c.key));
        MergeSymbol& left = syms[std::size_t(l)];
        // Stale: the left symbol was merged away or grew, or its right neighbour grew. A symbol keeps
        // its start and only grows by absorbing its right neighbour, so an unchanged byte sum of the
        // symbol and its current right neighbour means the same pair as when it was queued.
        if (left.n == 0 || left.next < 0) continue;
        MergeSymbol& right = syms[std::size_t(left.next)];
        if (left.n + right.n != c.size) continue;
        left.n += right.n;
        left.id = c.id;
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) syms[std::size_t(right.next)].prev = l;
        push(left.prev);
        push(l);
    }
}

}  // namespace aqpim::tok
