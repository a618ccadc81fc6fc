// Per automaton state, the tokens it reads (DfaTokenCache, json_constraint.h): one walk of the
// vocabulary's trie per state, kept within a byte budget.

#include "serve/json_constraint.h"
#include "serve/regex_dfa.h"

namespace aqpim::serve {

std::size_t DfaTokenCache::bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    return bytes_;
}

const std::uint64_t* DfaTokenCache::tokens_from(const RegexDfa& dfa, std::int32_t state, const GuideVocabulary& vocab) {
    const std::size_t words = (vocab.size() + 63) / 64;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!vocab_) vocab_ = &vocab;
        if (vocab_ != &vocab) return nullptr;  // the sets are another vocabulary's (and stay: others may read them)
        if (const auto it = sets_.find(state); it != sets_.end()) return it->second.get();
        if (budget_->load() < std::int64_t(words * 8)) return nullptr;
    }
    auto bits = std::make_unique<std::uint64_t[]>(words);  // zeroed
    std::vector<std::pair<std::int32_t, std::int32_t>> stack;  // trie node, automaton state
    vocab.walk(
        state,
        [&](std::int32_t& at, unsigned char b) {
            at = dfa.next(at, b);
            return at != RegexDfa::kDead;
        },
        [&](std::int32_t t) { bits[std::size_t(t) / 64] |= std::uint64_t(1) << (t % 64); }, stack);
    std::lock_guard<std::mutex> lk(mu_);
    if (const auto it = sets_.find(state); it != sets_.end()) return it->second.get();  // another thread filled it meanwhile
    if (budget_->fetch_sub(std::int64_t(words * 8)) < std::int64_t(words * 8)) {
        budget_->fetch_add(std::int64_t(words * 8));
        return nullptr;
    }
    bytes_ += words * 8;
    return sets_.emplace(state, std::move(bits)).first->second.get();
}

}  // namespace aqpim::serve
