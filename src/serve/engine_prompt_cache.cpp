// The serving engine's prompt cache (llama-server's cache_prompt; docs/serve.md "Prompt cache"):
// finished sequences stay in their slots until admission needs the room, and a prompt that begins
// with every token of one continues it (scheduler thread).

#include <algorithm>

#include "serve/engine_impl.h"

namespace aqpim::serve {

int Engine::Impl::cached_match(const GenerationRequest& r) const {
    if (!opt.cache_prompt || !r.cache_prompt || r.prompt_logprobs || r.resume_slot >= 0) return -1;
    int best = -1;
    for (std::size_t id = 0; id < slots.size(); ++id) {
        const Slot& s = slots[id];
        if (s.phase != SlotPhase::cached || s.n_cached >= std::int64_t(r.prompt.size())) continue;
        if (best >= 0 && s.n_cached <= slots[std::size_t(best)].n_cached) continue;
        if (s.request.cache_salt != r.cache_salt) continue;
        if (std::equal(s.tokens.begin(), s.tokens.begin() + s.n_cached, r.prompt.begin())) best = int(id);
    }
    return best;
}

Engine::Impl::Slot* Engine::Impl::eviction_candidate(const Pending& head) {
    const int own = head.request.resume_slot >= 0 ? head.request.resume_slot : cached_match(head.request);
    Slot* oldest = nullptr;
    std::uint64_t evictable = 0;
    for (Slot& s : slots)
        if (s.phase == SlotPhase::cached && int(&s - slots.data()) != own) {
            evictable += s.reserve;
            if (!oldest || s.kept_at < oldest->kept_at) oldest = &s;
        }
    if (!oldest) return nullptr;
    std::uint64_t need = head.reserve, released = 0;
    if (own >= 0) {
        const Slot& s = slots[std::size_t(own)];
        need = head.request.resume_slot >= 0 ? resume_reservation(s, head.request) : head.reserve;
        released = s.reserve;  // the sequence head continues gives its reservation up for need
    } else if (free_slot() < 0) {
        return oldest;  // short of a slot: the least recently used makes one
    }
    // Parked sequences that could go to disk count as room too: the cache goes before them.
    std::uint64_t spillable = 0;
    if (store && store->can_spill())
        for (const Slot& s : slots)
            if (s.phase == SlotPhase::parked && !s.spill_failed && int(&s - slots.data()) != own) spillable += s.reserve;
    if (reserved - released - evictable - spillable + need > opt.kv_budget_bytes) return nullptr;
    return oldest;
}

void Engine::Impl::start_cached(Slot& s, Pending& p) {
    const std::int64_t reused = s.n_cached;
    reserved -= s.reserve;  // start() adds the request's worst case
    s.reserve = p.reserve;
    s.tokens = p.request.prompt;  // begins with the cached tokens (cached_match)
    s.sampler = std::make_unique<Sampler>(p.request.sampler);
    s.recorder.reset();  // its chunks do not start at position 0: nothing to store
    start(s, p);
    std::lock_guard<std::mutex> lk(mu);
    ++cache_hits;
    cache_tokens_reused += std::uint64_t(reused);
    published.prompt_tokens += std::uint64_t(reused);
}

bool Engine::Impl::keeps_cached(const Slot& s, FinishReason reason) const {
    return opt.cache_prompt && s.request.cache_prompt && s.in_cache && s.n_cached > 0 &&
           (reason == FinishReason::stop || reason == FinishReason::length);
}

void Engine::Impl::cache_finished(Slot& s) {
    s.recorder.reset();
    s.phase = SlotPhase::cached;
    s.kept_at = ++kept_count;
    s.on_event = nullptr;
    reserved -= s.reserve;
    s.reserve = reservation(s.n_cached);
    reserved += s.reserve;
}

}  // namespace aqpim::serve
