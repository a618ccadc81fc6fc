// Per recognizer state, the tokens it reads (TokenSetCache, json_constraint.h): one walk of the
// vocabulary's trie per state, kept within a byte budget.

#include "serve/json_constraint.h"
#include "serve/regex_dfa.h"

namespace aqpim::serve {

std::size_t TokenSetCache::bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    return bytes_;
}

const std::uint64_t* TokenSetCache::tokens(std::string_view key, const GuideVocabulary& vocab,
                                           const std::function<void(std::uint64_t*)>& fill) {
    const std::size_t words = (vocab.size() + 63) / 64;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!vocab_) vocab_ = &vocab;
        if (vocab_ != &vocab) return nullptr;  // the sets are another vocabulary's (and stay: others may read them)
        if (const auto it = sets_.find(std::string(key)); it != sets_.end()) return it->second.get();
        if (budget_->load() < std::int64_t(words * 8 + key.size())) return nullptr;
    }
    auto bits = std::make_unique<std::uint64_t[]>(words);  // zeroed
    fill(bits.get());
    std::lock_guard<std::mutex> lk(mu_);
    if (const auto it = sets_.find(std::string(key)); it != sets_.end()) return it->second.get();  // another thread filled it meanwhile
    const std::int64_t cost = std::int64_t(words * 8 + key.size());
    if (budget_->fetch_sub(cost) < cost) {
        budget_->fetch_add(cost);
        return nullptr;
    }
    bytes_ += std::size_t(cost);
    return sets_.emplace(std::string(key), std::move(bits)).first->second.get();
}

const std::uint64_t* TokenSetCache::tokens_from(const RegexDfa& dfa, std::int32_t state, const GuideVocabulary& vocab) {
    return tokens(std::string_view(reinterpret_cast<const char*>(&state), sizeof state), vocab, [&](std::uint64_t* bits) {
        std::vector<std::pair<std::int32_t, std::int32_t>> stack;  // trie node, automaton state
        vocab.walk(
            state,
            [&](std::int32_t& at, unsigned char b) {
                at = dfa.next(at, b);
                return at != RegexDfa::kDead;
            },
            [&](std::int32_t t) { bits[std::size_t(t) / 64] |= std::uint64_t(1) << (t % 64); }, stack);
    });
}

}  // namespace aqpim::serve
