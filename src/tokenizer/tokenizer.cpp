#include "aqpim/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "aqpim/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace aqpim {

std::shared_ptr<const Tokenizer> Tokenizer::create(VocabData vocab) {
    switch (vocab.kind) {
        case VocabKind::spm: return tok::make_spm_tokenizer(std::move(vocab));
        case VocabKind::bpe: return tok::make_bpe_tokenizer(std::move(vocab));
    }
    AQPIM_FAIL("unknown VocabKind {}", int(vocab.kind));
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    std::int32_t prev = -1;
    for (const std::int32_t id : ids) {
        out += piece(prev, id);
        prev = id;
    }
    return out;
}

namespace tok {

namespace {

void check_id(std::int32_t id, std::size_t n, const char* what) {
    AQPIM_CHECK(id == -1 || (id >= 0 && std::size_t(id) < n), "vocabulary: {} id {} is outside [0, {}) (and not -1)",
                what, id, n);
}

}  // namespace

TokenizerBase::TokenizerBase(VocabData vocab) : Tokenizer(std::move(vocab)) {
    auto& v = vocab_;
    const std::size_t n = v.tokens.size();
    AQPIM_CHECK(n > 0, "vocabulary: no tokens");
    AQPIM_CHECK(n < std::size_t(std::numeric_limits<std::int32_t>::max()), "vocabulary: {} tokens is too many", n);
    if (v.types.empty()) v.types.assign(n, TokenType::normal);
    AQPIM_CHECK(v.types.size() == n, "vocabulary: {} token types for {} tokens", v.types.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
        const auto t = std::int32_t(v.types[i]);
        AQPIM_CHECK(t >= 0 && t <= 6, "vocabulary: token {} has type {} (expected 0..6)", i, t);
    }
    if (v.scores.empty() && v.kind == VocabKind::spm) v.scores.assign(n, 0.0f);
    AQPIM_CHECK(v.scores.empty() || v.scores.size() == n, "vocabulary: {} scores for {} tokens", v.scores.size(), n);
    for (std::size_t i = 0; i < v.scores.size(); ++i) {
        AQPIM_CHECK(!std::isnan(v.scores[i]), "vocabulary: token {} has a NaN score", i);
    }
    check_id(v.bos, n, "BOS");
    check_id(v.eos, n, "EOS");
    check_id(v.unk, n, "UNK");
    check_id(v.pad, n, "padding");

    index_.build(v.tokens);

    for (std::size_t i = 0; i < n; ++i) {
        if (is_special(std::int32_t(i)) && !v.tokens[i].empty()) specials_.push_back(std::int32_t(i));
    }
    std::stable_sort(specials_.begin(), specials_.end(), [&](std::int32_t a, std::int32_t b) {
        return v.tokens[std::size_t(a)].size() > v.tokens[std::size_t(b)].size();
    });
}

void TokenIndex::build(const std::vector<std::string>& tokens) {
    tokens_ = &tokens;
    std::size_t cap = 16;
    while (cap < tokens.size() * 2) cap *= 2;
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
    for (std::size_t id = 0; id < tokens.size(); ++id) {
        const std::uint64_t h = hash(tokens[id]);
        const auto tag = std::uint32_t(h >> 32);
        for (std::size_t i = std::size_t(h) & mask_;; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.id < 0 || (s.tag == tag && tokens[std::size_t(s.id)] == tokens[id])) {
                s = Slot{tag, std::int32_t(id)};  // a later duplicate replaces the earlier id
                break;
            }
        }
    }
}

bool TokenizerBase::is_special(std::int32_t id) const {
    const TokenType t = type(id);
    return t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown;
}

std::string TokenizerBase::render(std::int32_t id) const {
    const std::string& text = vocab_.tokens[std::size_t(id)];
    switch (type(id)) {
        case TokenType::control:
        case TokenType::unknown:
        case TokenType::unused: return {};
        case TokenType::user_defined: return text;
        case TokenType::byte: {
            const int b = unicode::parse_byte_token(text);
            if (b >= 0) return std::string(1, char(b));
            break;
        }
        case TokenType::undefined:
        case TokenType::normal: break;
    }
    return render_text(text);
}

void TokenizerBase::build_pieces() {
    pieces_.resize(vocab_.tokens.size());
    for (std::size_t i = 0; i < pieces_.size(); ++i) pieces_[i] = render(std::int32_t(i));
}

void TokenizerBase::build_merge_table(MergeTable& table) const {
    const auto& merges = vocab_.merges;
    table.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
        const std::string& m = merges[r];
        const std::size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        AQPIM_CHECK(sp != std::string::npos, "vocabulary: merge {} '{}' is not 'left right'", r, m);
        const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
        const std::int32_t l = find(left), rr = find(right);
        AQPIM_CHECK(l >= 0 && rr >= 0, "vocabulary: merge {} '{}': '{}' is not a token", r, m, l < 0 ? left : right);
        const std::int32_t result = find(std::string(left) + std::string(right));
        AQPIM_CHECK(result >= 0, "vocabulary: merge {} '{}': the merged text is not a token", r, m);
        AQPIM_CHECK(r <= std::size_t(std::numeric_limits<std::int32_t>::max()), "vocabulary: too many merges");
        table.try_emplace(merge_key(l, rr), MergeRule{std::int32_t(r), result});
    }
}

std::vector<TokenizerBase::Fragment> TokenizerBase::partition(std::string_view text) const {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({-1, 0, text.size()});
    std::vector<Fragment> next;
    for (const std::int32_t sid : specials_) {
        const std::string& s = vocab_.tokens[std::size_t(sid)];
        if (text.find(s) == std::string_view::npos) continue;  // common case: one scan, no rebuild
        next.clear();
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            std::size_t pos = f.off;
            const std::size_t end = f.off + f.len;
            while (pos < end) {
                const std::size_t hit = text.substr(0, end).find(s, pos);
                if (hit == std::string_view::npos) break;
                if (hit > pos) next.push_back({-1, pos, hit - pos});
                next.push_back({sid, 0, 0});
                pos = hit + s.size();
            }
            if (pos < end) next.push_back({-1, pos, end - pos});
        }
        frags.swap(next);
    }
    return frags;
}

std::vector<std::int32_t> TokenizerBase::encode(std::string_view text, bool add_bos) const {
    std::vector<std::int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && vocab_.add_bos) {
        AQPIM_CHECK(vocab_.bos >= 0, "tokenizer: add_bos is set but the vocabulary has no BOS token");
        out.push_back(vocab_.bos);
    }
    bool prev_special = true;  // the first fragment gets the dummy prefix
    std::string buf;
    for (const Fragment& f : partition(text)) {
        if (f.token >= 0) {
            out.push_back(f.token);
            prev_special = true;
            continue;
        }
        buf.clear();
        if (vocab_.add_space_prefix && prev_special) buf.push_back(' ');
        buf.append(text.substr(f.off, f.len));
        encode_fragment(buf, out);
        prev_special = false;
    }
    if (add_bos && vocab_.add_eos) {
        AQPIM_CHECK(vocab_.eos >= 0, "tokenizer: add_eos is set but the vocabulary has no EOS token");
        out.push_back(vocab_.eos);
    }
    return out;
}

std::string TokenizerBase::piece(std::int32_t prev, std::int32_t id) const {
    AQPIM_CHECK(id >= 0 && std::size_t(id) < pieces_.size(), "tokenizer: token id {} is outside [0, {})", id,
                pieces_.size());
    const std::string& p = pieces_[std::size_t(id)];
    // The dummy prefix: the encoder put a space before the first fragment and after every special
    // token; print it nowhere there (llama2.c strips it after BOS).
    const bool at_start = prev < 0 || std::size_t(prev) >= pieces_.size() || prev == vocab_.bos ||
                          type(prev) == TokenType::control || type(prev) == TokenType::user_defined;
    if (vocab_.add_space_prefix && at_start && !p.empty() && p[0] == ' ') return p.substr(1);
    return p;
}

}  // namespace tok
}  // namespace aqpim
