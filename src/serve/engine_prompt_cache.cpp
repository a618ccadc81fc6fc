// The serving engine's prompt cache (llama-server's cache_prompt; docs/serve.md "Prompt cache"):
// finished sequences stay in their slots until admission needs the room (then they go to disk when
// a disk tier takes them), and a prompt that begins with every token of one continues it
// (scheduler thread).

#include <fmt/format.h>

#include <algorithm>

#include "aqpim/error.h"
#include "serve/engine_impl.h"

namespace aqpim::serve {

int Engine::Impl::cached_match(const GenerationRequest& r) const {
    if (!opt.cache_prompt || !r.cache_prompt || r.prompt_logprobs || r.resume_slot >= 0) return -1;
    int best = -1;
    for (std::size_t id = 0; id < slots.size(); ++id) {
        const Slot& s = slots[id];
        if (s.phase != SlotPhase::cached || s.n_cached >= std::int64_t(r.prompt.size())) continue;
        if (best >= 0 && s.n_cached <= slots[std::size_t(best)].n_cached) continue;
        const std::size_t n = std::size_t(s.n_cached);
        // The last token first: a prompt that shares a long system prompt with a sequence and then
        // departs from it is told apart in one comparison (this runs under the queue's lock).
        if (s.tokens[n - 1] != r.prompt[n - 1] || s.request.cache_salt != r.cache_salt) continue;
        if (std::equal(s.tokens.begin(), s.tokens.begin() + std::ptrdiff_t(n), r.prompt.begin())) best = int(id);
    }
    return best;
}

Engine::Impl::Slot* Engine::Impl::oldest_cached(int except) {
    Slot* oldest = nullptr;
    for (Slot& s : slots)
        if (s.phase == SlotPhase::cached && int(&s - slots.data()) != except && (!oldest || s.kept_at < oldest->kept_at))
            oldest = &s;
    return oldest;
}

Engine::Impl::Slot* Engine::Impl::eviction_candidate(const Pending& head) {
    const Claim c = claim(head);
    Slot* oldest = oldest_cached(c.own);
    if (!oldest) return nullptr;
    // The room every other cached sequence and every parked one that could go to disk would give
    // (the cache goes first): not enough, and head waits on running requests, the cache kept meanwhile.
    const bool spills = store && store->can_spill();
    std::uint64_t room = 0;
    for (std::size_t id = 0; id < slots.size(); ++id) {
        const Slot& s = slots[id];
        if (int(id) != c.own && (s.phase == SlotPhase::cached || (spills && s.phase == SlotPhase::parked && !s.spill_failed)))
            room += s.reserve;
    }
    if (reserved - c.released - room + c.need > opt.kv_budget_bytes) return nullptr;
    return oldest;  // short of the bytes or of a slot: the least recently used goes
}

void Engine::Impl::start_cached(Slot& s, Pending& p) {
    const std::int64_t reused = s.n_cached;
    reserved -= s.reserve;  // start() adds the request's worst case
    s.reserve = p.reserve;
    s.tokens = p.request.prompt;  // begins with the cached tokens (cached_match)
    s.sampler = std::make_unique<Sampler>(p.request.sampler);
    s.recorder.reset();  // its chunks do not start at position 0: nothing to store
    start(s, p);
    count_hit(reused, false);
}

void Engine::Impl::count_hit(std::int64_t reused, bool from_disk) {
    std::lock_guard<std::mutex> lk(mu);
    ++cache_hits;
    cache_disk_hits += from_disk ? 1 : 0;
    cache_tokens_reused += std::uint64_t(reused);
    published.prompt_tokens += std::uint64_t(reused);
}

void Engine::Impl::drop_cached(Slot& s, const std::string& keep) {
    if (store && store->can_spill()) {
        SlotState st;
        st.tokens.assign(s.tokens.begin(), s.tokens.begin() + s.n_cached);  // the last drawn token was never fed
        st.n_cached = s.n_cached;
        try {
            store->cache_on_disk(*cache, int(&s - slots.data()), st, s.request.cache_salt, keep);
        } catch (const Error& e) {
            if (opt.warn) opt.warn(fmt::format("serve: a cached sequence was dropped, not written to disk: {}", e.what()));
        }
    }
    release(s);
}

std::optional<EngineStore::DiskCachedHit> Engine::Impl::disk_match(const GenerationRequest& r) const {
    if (!store || !opt.cache_prompt || !r.cache_prompt || r.prompt_logprobs || r.resume_slot >= 0) return std::nullopt;
    return store->disk_cached_match(r.prompt, r.cache_salt);
}

bool Engine::Impl::continue_from_disk(Slot& s) {
    const std::optional<EngineStore::DiskCachedHit> hit = disk_match(s.request);
    if (!hit || !store->restore_disk_cached(*cache, int(&s - slots.data()), *hit, s.tokens)) return false;
    s.n_cached = hit->n_tokens;
    s.in_cache = true;  // no recorder: its chunks do not start at position 0
    count_hit(hit->n_tokens, true);
    return true;
}

bool Engine::Impl::keeps_cached(const Slot& s, FinishReason reason) const {
    return opt.cache_prompt && s.request.cache_prompt && s.in_cache && s.n_cached > 0 &&
           (reason == FinishReason::stop || reason == FinishReason::length);
}

void Engine::Impl::cache_finished(Slot& s) {
    s.recorder.reset();
    // What only a running request reads goes: a cached slot holds its KV, tokens and salt.
    std::vector<float>().swap(s.processed);
    std::vector<ScoredToken>().swap(s.prompt_scores);
    s.guide = OutputGuide();
    s.request.guide_vocabulary.reset();
    s.request.json_schema.reset();
    s.request.regex.reset();
    s.request.grammar.reset();
    s.phase = SlotPhase::cached;
    s.kept_at = ++kept_count;
    s.on_event = nullptr;
    reserved -= s.reserve;
    s.reserve = reservation(s.n_cached);
    reserved += s.reserve;
}

}  // namespace aqpim::serve
