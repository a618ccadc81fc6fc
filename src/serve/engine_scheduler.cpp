// The serving engine's scheduler thread: admission in order, prefill chunks between decode steps,
// one token for every decoding sequence per step, parking and spilling (docs/serve.md).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/threads.h"
#include "serve/engine_impl.h"

namespace aqpim::serve {

namespace {

/// How long a failed spill waits before the scheduler tries that parked sequence again.
constexpr std::chrono::seconds kSpillRetry{1};

/// The final event of a request that never started in a slot.
TokenEvent unstarted(std::uint64_t id, FinishReason reason, std::string error = {}) {
    TokenEvent ev;
    ev.request_id = id;
    ev.finish = reason;
    ev.error = std::move(error);
    return ev;
}

/// log-softmax of logits [n] at `token`, and the k most likely tokens (best first, lowest id on ties).
float log_probabilities(const float* logits, int n, std::int32_t token, int k, std::vector<TokenLogprob>& top) {
    const float mx = *std::max_element(logits, logits + n);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i] - mx));
    const float lse = mx + float(std::log(sum));
    top.clear();
    if (k > 0) {
        std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) ids[std::size_t(i)] = i;
        k = std::min(k, n);
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::int32_t a, std::int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        for (int i = 0; i < k; ++i) top.push_back({ids[std::size_t(i)], logits[ids[std::size_t(i)]] - lse});
    }
    return logits[token] - lse;
}

bool ends_with(const std::vector<std::int32_t>& tokens, std::size_t first, const std::vector<std::int32_t>& tail) {
    if (tail.empty() || tokens.size() - first < tail.size()) return false;
    return std::equal(tail.begin(), tail.end(), tokens.end() - std::ptrdiff_t(tail.size()));
}

}  // namespace

bool Engine::Impl::busy() const {
    for (const Slot& s : slots)
        if (s.phase == SlotPhase::prefill || s.phase == SlotPhase::decode) return true;
    return false;
}

/// A request holds the slot (looking up its prefix, prefilling or decoding).
bool Engine::Impl::running(const Slot& s) {
    return s.phase == SlotPhase::fetch || s.phase == SlotPhase::prefill || s.phase == SlotPhase::decode;
}

int Engine::Impl::free_slot() const {
    for (std::size_t i = 0; i < slots.size(); ++i)
        if (slots[i].phase == SlotPhase::idle) return int(i);
    return -1;
}

Engine::Impl::Claim Engine::Impl::claim(const Pending& p) const {
    Claim c;
    if (p.request.resume_slot >= 0) {
        c.own = p.request.resume_slot;
        c.need = resume_reservation(slots[std::size_t(c.own)], p.request);
    } else {
        c.own = cached_match(p.request);
        c.need = p.reserve;
    }
    if (c.own >= 0) c.released = slots[std::size_t(c.own)].reserve;
    return c;
}

/// Whether the queue's head can start now (called under mu, from the scheduler thread).
bool Engine::Impl::admissible(const Pending& p) const {
    if (p.request.resume_slot >= 0) {  // start_resume reports a slot with nothing parked or a sequence too big
        const Slot& s = slots[std::size_t(p.request.resume_slot)];
        if (s.phase != SlotPhase::parked && s.phase != SlotPhase::spilled) return true;
        if (base_bytes + resume_reservation(s, p.request) > opt.kv_budget_bytes) return true;
    }
    const Claim c = claim(p);
    return (c.own >= 0 || free_slot() >= 0) && reserved - c.released + c.need <= opt.kv_budget_bytes;
}

void Engine::Impl::run() {
    for (;;) {
        std::vector<Pending> cancelled, admitted;
        std::deque<std::packaged_task<void()>> todo;
        std::set<std::uint64_t> to_cancel;
        {
            std::unique_lock<std::mutex> lk(mu);
            const auto ready = [&] {
                return stopping || !tasks.empty() || !cancels.empty() || busy() || (store && store->has_fetched()) ||
                       (!queue.empty() && (admissible(queue.front()) || eviction_candidate(queue.front()) ||
                                             spill_candidate(queue.front())));
            };
            // A parked sequence whose spill failed (a disk short of room) is tried again after a
            // while: nothing else may come to wake a head that waits on its room.
            const auto failed = [&](const Slot& s) { return s.phase == SlotPhase::parked && s.spill_failed; };
            if (!std::any_of(slots.begin(), slots.end(), failed)) {
                cv.wait(lk, ready);
            } else if (!cv.wait_for(lk, kSpillRetry, ready)) {
                for (Slot& s : slots) s.spill_failed = false;
            }
            if (stopping) {
                for (Pending& p : queue) cancelled.push_back(std::move(p));
                queue.clear();
                for (Slot& s : slots)
                    if (running(s)) to_cancel.insert(s.request_id);
                todo.swap(tasks);
            } else {
                todo.swap(tasks);
                to_cancel.swap(cancels);
                for (auto it = queue.begin(); it != queue.end();)
                    if (to_cancel.count(it->id)) {
                        cancelled.push_back(std::move(*it));
                        it = queue.erase(it);
                    } else {
                        ++it;
                    }
            }
        }
        for (Pending& p : cancelled) final_event(p.on_event, unstarted(p.id, FinishReason::cancelled));
        for (Slot& s : slots)
            if (running(s) && to_cancel.count(s.request_id)) finish(s, FinishReason::cancelled);
        if (stopping_now()) {
            for (auto& t : todo) t();  // each sees the engine stopping through its own checks
            publish();
            return;
        }
        for (auto& t : todo) t();
        if (store)
            for (EngineStore::Fetched& f : store->take_fetched()) fetched(f);
        admit();
        step();
        publish();
    }
}

bool Engine::Impl::stopping_now() {
    std::lock_guard<std::mutex> lk(mu);
    return stopping;
}

/// Start queued requests in order while the head fits (FIFO: no request overtakes an older one);
/// cached sequences are dropped, then parked ones go to disk, while that makes room for the head.
void Engine::Impl::admit() {
    for (;;) {
        Pending p;
        Slot* evicted = nullptr;
        Slot* victim = nullptr;
        std::string keep;  // the sequence on disk that the head continues: an eviction does not push it out
        {
            std::lock_guard<std::mutex> lk(mu);
            if (queue.empty()) return;
            if (admissible(queue.front())) {
                p = std::move(queue.front());
                queue.pop_front();
            } else if ((evicted = eviction_candidate(queue.front()))) {
                ++cache_evictions;  // scheduler-thread state (under mu only because the queue is)
                if (claim(queue.front()).own < 0)  // it continues no sequence in memory (which start_new prefers)
                    if (const auto hit = disk_match(queue.front().request)) keep = hit->key;
            } else if (!(victim = spill_candidate(queue.front()))) {
                return;
            }
        }
        if (evicted) {
            drop_cached(*evicted, keep);
            continue;
        }
        if (victim) {  // to disk outside the lock: submit() does not wait for the write
            spill(*victim);
            continue;
        }
        if (p.request.resume_slot >= 0 ? !start_resume(p) : !start_new(p)) return;
    }
}

bool Engine::Impl::start_new(Pending& p) {
    if (const int m = cached_match(p.request); m >= 0) {
        start_cached(slots[std::size_t(m)], p);
        return true;
    }
    const int id = free_slot();
    Slot& s = slots[std::size_t(id)];
    s = Slot{};
    s.tokens = p.request.prompt;
    s.sampler = std::make_unique<Sampler>(p.request.sampler);
    s.reserve = p.reserve;
    start(s, p);
    if (continue_from_disk(s)) return true;
    if (store && s.request.cache_prompt && !s.request.prompt_logprobs && store->worth_lookup(s.tokens)) {  // scores need every row
        s.phase = SlotPhase::fetch;  // fetched() adds the sequence, restored or empty
        store->start_lookup(id, s.request_id, s.tokens, s.request.cache_salt);
        return true;
    }
    cache->add_sequence(id);
    s.in_cache = true;
    if (store) s.recorder = store->recorder(s.tokens, s.request.cache_salt);
    return true;
}

/// A lookup ended: restore what it found into the slot's sequence and prefill the rest.
void Engine::Impl::fetched(EngineStore::Fetched& f) {
    Slot& s = slots[std::size_t(f.slot)];
    if (s.phase != SlotPhase::fetch || s.request_id != f.request_id) return;  // cancelled meanwhile
    store::PrefixHit found = std::move(f.found);
    if (found.blocks > 0 && store->restore(*cache, f.slot, found, s.tokens)) {
        s.n_cached = found.n_tokens;
        std::lock_guard<std::mutex> lk(mu);
        published.prompt_tokens += std::uint64_t(found.n_tokens);
    } else {
        if (found.blocks > 0) found = {};  // refused: trust nothing it said
        cache->add_sequence(f.slot);
    }
    s.in_cache = true;
    s.recorder = store->recorder(s.tokens, s.request.cache_salt, std::move(found));
    s.phase = SlotPhase::prefill;
}

/// The parked sequence that goes to disk first to make room for `head` (the oldest parked;
/// never the one head resumes), or null: none, or spilling all of them would not make room
/// (running requests hold the budget), or head is short of a slot, not of bytes.
Engine::Impl::Slot* Engine::Impl::spill_candidate(const Pending& head) {
    if (!store || !store->can_spill()) return nullptr;
    const Claim c = claim(head);
    if (c.own < 0 && free_slot() < 0) return nullptr;
    std::uint64_t spillable = 0;
    Slot* oldest = nullptr;
    for (Slot& s : slots)
        if (s.phase == SlotPhase::parked && !s.spill_failed && int(&s - slots.data()) != c.own) {
            spillable += s.reserve;
            if (!oldest || s.kept_at < oldest->kept_at) oldest = &s;
        }
    if (reserved - c.released - spillable + c.need > opt.kv_budget_bytes) return nullptr;
    return oldest;
}

/// Move a parked sequence to the disk tier and release its bytes (a failed write keeps it).
void Engine::Impl::spill(Slot& s) {
    const int id = int(&s - slots.data());
    SlotState st;
    st.tokens = s.tokens;
    st.n_cached = s.n_cached;
    if (s.sampler) st.sampler = s.sampler->state();
    std::optional<std::string> key;
    try {
        key = store->spill(*cache, id, st);
    } catch (const Error& e) {
        if (opt.warn) opt.warn(fmt::format("serve: slot {} stays in memory: {}", id, e.what()));
    }
    if (!key) {
        s.spill_failed = true;
        return;
    }
    cache->remove_sequence(id);
    s.in_cache = false;
    s.spilled_key = *key;
    s.phase = SlotPhase::spilled;
    reserved -= s.reserve;
    s.reserve = 0;
}

/// Bring a spilled sequence back into the cache (parked again); aqpim::Error when it cannot be read.
void Engine::Impl::unspill(Slot& s) {
    const int id = int(&s - slots.data());
    const std::vector<std::uint8_t> bytes = store->spilled_state(s.spilled_key, true);
    (void)restore_kv_state(bytes, *cache, id, model_id());
    store->drop(s.spilled_key);
    s.spilled_key.clear();
    s.in_cache = true;
    s.phase = SlotPhase::parked;
}

/// Worst case of resuming parked slot s with request r.
std::uint64_t Engine::Impl::resume_reservation(const Slot& s, const GenerationRequest& r) const {
    return reservation(std::int64_t(s.tokens.size() + r.prompt.size()) + r.max_tokens);
}

/// Continue a parked slot (admissible() has checked that it fits now); a request that cannot
/// continue it finishes with an error.
bool Engine::Impl::start_resume(Pending& p) {
    Slot& s = slots[std::size_t(p.request.resume_slot)];
    const GenerationRequest& r = p.request;
    std::string why;
    const std::int64_t n = std::int64_t(s.tokens.size() + r.prompt.size()) + r.max_tokens;
    if (s.phase != SlotPhase::parked && s.phase != SlotPhase::spilled)
        why = fmt::format("slot {} holds no parked sequence ({})", r.resume_slot, slot_phase_name(s.phase));
    else if (n > opt.ctx)
        why = fmt::format("slot {} holds {} tokens: + prompt {} + max_tokens {} exceeds the context of {}",
                          r.resume_slot, s.tokens.size(), r.prompt.size(), r.max_tokens, opt.ctx);
    else if (base_bytes + resume_reservation(s, r) > opt.kv_budget_bytes)
        why = fmt::format("resuming slot {} needs {} bytes of KV, more than the budget of {} bytes", r.resume_slot,
                          resume_reservation(s, r), opt.kv_budget_bytes - base_bytes);
    else if (std::int64_t(s.tokens.size() + r.prompt.size()) == s.n_cached)
        why = fmt::format("slot {}: nothing to feed (every token is cached): give prompt tokens", r.resume_slot);
    if (why.empty() && s.phase == SlotPhase::spilled) {
        try {
            unspill(s);
        } catch (const Error& e) {
            why = fmt::format("slot {}: its sequence could not be brought back from disk: {}", r.resume_slot, e.what());
        }
    }
    if (!why.empty()) {
        final_event(p.on_event, unstarted(p.id, FinishReason::error, why));
        return true;
    }
    reserved -= s.reserve;  // start() adds the new worst case
    s.reserve = resume_reservation(s, r);
    s.tokens.insert(s.tokens.end(), r.prompt.begin(), r.prompt.end());
    if (!s.sampler) s.sampler = std::make_unique<Sampler>(r.sampler);
    start(s, p);
    return true;
}

void Engine::Impl::start(Slot& s, Pending& p) {
    s.phase = SlotPhase::prefill;
    s.request_id = p.id;
    s.on_event = std::move(p.on_event);
    s.n_prompt = int(p.request.prompt.size());
    s.request = std::move(p.request);
    s.n_generated = 0;  // a parked sequence continued counts this request's tokens only
    s.first_generated = s.tokens.size();
    s.guide = s.request.regex     ? OutputGuide(*s.request.regex)
              : s.request.grammar ? OutputGuide(*s.request.grammar)
                                  : OutputGuide(s.request.json_schema.get());
    s.guide.reason_first(s.request.reasoning);
    s.guide_end_tokens.clear();
    for (const auto& seq : s.request.stop_sequences)
        if (seq.size() == 1) s.guide_end_tokens.push_back(seq[0]);
    s.prompt_scores.clear();
    if (s.request.prompt_logprobs)
        for (std::size_t i = s.tokens.size() - std::size_t(s.n_prompt); i < s.tokens.size(); ++i)
            s.prompt_scores.push_back({s.tokens[i], std::nullopt, {}});
    s.since_submit = p.since_submit;
    s.since_start.reset();
    s.n_prompt_fed = 0;
    s.prompt_seconds = -1;
    reserved += s.reserve;
}

/// One step: a prefill chunk of one waiting prompt, then one token for every decoding sequence.
void Engine::Impl::step() {
    prefill_one();
    decode_all();
}

void Engine::Impl::prefill_one() {
    for (std::size_t k = 0; k < slots.size(); ++k) {
        const std::size_t id = (prefill_cursor + k) % slots.size();
        Slot& s = slots[id];
        if (s.phase != SlotPhase::prefill) continue;
        prefill_cursor = id;  // keep feeding the same prompt until it is done: the oldest start first
        const std::int64_t n = std::min<std::int64_t>(opt.prefill_chunk, std::int64_t(s.tokens.size()) - s.n_cached);
        const bool all_rows = s.request.prompt_logprobs;
        const BatchSequence seq{int(id), std::span<const std::int32_t>(s.tokens).subspan(std::size_t(s.n_cached), std::size_t(n)), all_rows};
        Timer t;
        if (!forward({&seq, 1}, false)) return;
        if (all_rows) score_prompt(s, s.n_cached, n);
        s.n_cached += n;
        s.n_prompt_fed += int(std::min<std::int64_t>(n, s.n_prompt));
        record_phase(true, t.seconds(), std::uint64_t(n));
        if (s.recorder) record_block(s);
        if (s.n_cached == std::int64_t(s.tokens.size())) {
            s.recorder.reset();  // writes its last block
            s.phase = SlotPhase::decode;
            if (all_rows && s.on_event) {
                TokenEvent scores;
                scores.request_id = s.request_id;
                scores.n_prompt = s.n_prompt;
                scores.prompt = std::move(s.prompt_scores);
                s.on_event(scores);
            }
            if (s.request.max_tokens == 0) return finish(s, FinishReason::length);  // the prompt's scores only
            accept(s, logits.data() + (all_rows ? std::size_t(n - 1) * std::size_t(weights.config.n_vocab) : 0));
        }
        return;
    }
}

void Engine::Impl::score_prompt(Slot& s, std::int64_t first_pos, std::int64_t n) const {
    const int n_vocab = weights.config.n_vocab;
    const std::int64_t first_prompt = std::int64_t(s.tokens.size()) - s.n_prompt;
    parallel_for(
        n,
        [&](std::int64_t r) {
            const std::int64_t next = first_pos + r + 1;  // the token row r predicts
            if (next < first_prompt || next >= std::int64_t(s.tokens.size())) return;
            ScoredToken& st = s.prompt_scores[std::size_t(next - first_prompt)];
            st.logprob = log_probabilities(logits.data() + std::size_t(r) * std::size_t(n_vocab), n_vocab, st.token,
                                           s.request.top_logprobs, st.top);
        },
        opt.threads);
}

/// After a prefill chunk: the block that ends here goes to the store's recorder.
void Engine::Impl::record_block(Slot& s) {
    const int id = int(&s - slots.data());
    try {
        store->record(*s.recorder, *cache, id, s.tokens, s.n_cached);
    } catch (const Error& e) {  // a scheme that cannot save its state: record nothing more
        if (opt.warn) opt.warn(fmt::format("kv store: blocks of slot {} not recorded: {}", id, e.what()));
        s.recorder.reset();
    }
}

void Engine::Impl::decode_all() {
    std::vector<BatchSequence> batch;
    for (std::size_t id = 0; id < slots.size(); ++id) {
        const Slot& s = slots[id];
        if (s.phase != SlotPhase::decode) continue;
        batch.push_back({int(id), std::span<const std::int32_t>(s.tokens).subspan(std::size_t(s.n_cached), 1), false});
    }
    if (batch.empty()) return;
    Timer t;
    if (!forward(batch, true)) return;
    record_phase(false, t.seconds(), batch.size());
    const std::size_t n_vocab = std::size_t(weights.config.n_vocab);
    // Every sequence draws on the pool's threads (its own sampler: which thread draws changes
    // nothing), then the tokens are reported in slot order on this thread.
    draws.resize(batch.size());
    parallel_for(
        std::int64_t(batch.size()),
        [&](std::int64_t i) {
            const std::size_t at = std::size_t(i);
            draws[at] = draw(slots[std::size_t(batch[at].seq_id)], logits.data() + at * n_vocab);
        },
        opt.threads);
    for (std::size_t i = 0; i < batch.size(); ++i) {
        Slot& s = slots[std::size_t(batch[i].seq_id)];
        s.n_cached += 1;
        report(s, std::move(draws[i]));
    }
}

/// A forward call; a failure (which admission should make impossible) ends every sequence in it.
bool Engine::Impl::forward(std::span<const BatchSequence> batch, bool batch_invariant) {
    try {
        model.set_batch_invariant(batch_invariant);
        model.forward(batch, *cache, logits);
        return true;
    } catch (const Error& e) {
        for (const BatchSequence& b : batch) {
            Slot& s = slots[std::size_t(b.seq_id)];
            s.request.park = false;
            finish(s, FinishReason::error, e.what());
        }
        return false;
    }
}

void Engine::Impl::record_phase(bool prefill, double seconds, std::uint64_t n_tokens) {
    std::lock_guard<std::mutex> lk(mu);
    (prefill ? published.prefill_seconds : published.decode_seconds) += seconds;
    (prefill ? published.prefill_tokens : published.decode_tokens) += n_tokens;
    if (prefill) published.prompt_tokens += n_tokens;
}

/// The next token of s from its logits, with its log probabilities: touches only s's sampler.
TokenEvent Engine::Impl::draw(Slot& s, const float* lg) const {
    const int n_vocab = weights.config.n_vocab;
    TokenEvent ev;
    const float* drawn_from = lg;
    if (s.request.processing.active() || s.request.guide_vocabulary) {  // the logprobs stay the model's
        s.processed.assign(lg, lg + n_vocab);
        // The output constraint first: top_k and min_p then choose among the tokens it lets through
        // (their largest logit is never dropped), and the bias and penalties keep a dropped one at about -1e30.
        if (s.request.guide_vocabulary)
            s.guide.mask(*s.request.guide_vocabulary, s.processed.data(), n_vocab, kDroppedLogit, s.guide_end_tokens);
        if (s.request.processing.active())
            apply_logit_processing(s.request.processing, s.tokens, s.first_generated, s.sampler->params().temperature,
                                   s.processed.data(), n_vocab);
        drawn_from = s.processed.data();
    }
    ev.token = s.sampler->sample(drawn_from, n_vocab);
    if (ev.token != opt.eos_token || s.request.prompt_logprobs || s.request.report_eos)
        ev.logprob = log_probabilities(lg, n_vocab, ev.token, s.request.top_logprobs, ev.top_logprobs);
    return ev;
}

/// Report the token s drew, and finish s when it is done.
void Engine::Impl::report(Slot& s, TokenEvent ev) {
    const std::int32_t next = ev.token;
    s.tokens.push_back(next);  // fed by the next step
    // EOS ends the request; a scoring request (prompt_logprobs) reports it first, as vLLM does:
    // the token after the prompt is what its scores are read up to.
    const bool eos = next == opt.eos_token;
    if (eos && !s.request.prompt_logprobs && !s.request.report_eos) return finish(s, FinishReason::stop);
    // The output constraint: the mask let only continuations through, or EOS when nothing else was
    // left; a token it refuses (none was left at all) is not sent: the text stays a prefix.
    if (s.request.guide_vocabulary && !eos && !s.guide.feed(s.request.guide_vocabulary->text(next))) {
        s.tokens.pop_back();
        return finish(s, FinishReason::stop);
    }
    const bool guide_done = s.request.guide_vocabulary && s.guide.complete();
    ++s.n_generated;
    if (s.prompt_seconds < 0) s.prompt_seconds = s.since_start.seconds();
    stamp(s, ev);
    {
        std::lock_guard<std::mutex> lk(mu);
        ++published.generated_tokens;
        if (s.n_generated == 1)
            published.ttft.observe(s.since_submit.seconds());
        else
            published.tpot.observe(s.since_token.seconds());
    }
    s.since_token.reset();
    const bool stop_now = s.on_event && s.on_event(ev);
    if (eos || guide_done) return finish(s, FinishReason::stop);
    bool stop = stop_now;
    for (const auto& seq : s.request.stop_sequences) stop = stop || ends_with(s.tokens, s.first_generated, seq);
    if (stop) return finish(s, FinishReason::stop);
    if (s.n_generated >= s.request.max_tokens) return finish(s, FinishReason::length);
}

/// End s's request: release its pages (or park it), then its final event.
void Engine::Impl::finish(Slot& s, FinishReason reason, const std::string& error) {
    const bool park = s.request.park && (reason == FinishReason::stop || reason == FinishReason::length);
    EventCallback cb = std::move(s.on_event);
    TokenEvent ev;
    stamp(s, ev);
    ev.finish = reason;
    ev.error = error;
    if (park) {
        s.recorder.reset();
        s.phase = SlotPhase::parked;
        s.kept_at = ++kept_count;
        s.spill_failed = false;
        s.on_event = nullptr;
    } else if (keeps_cached(s, reason)) {
        cache_finished(s);
    } else {
        release(s);
    }
    publish();  // stats() tells the pages are back before the client hears the end
    final_event(cb, std::move(ev));
}

void Engine::Impl::stamp(const Slot& s, TokenEvent& ev) const {
    ev.request_id = s.request_id;
    ev.n_prompt = s.n_prompt;
    ev.n_generated = s.n_generated;
    ev.slot = int(&s - slots.data());
    ev.n_prompt_fed = s.n_prompt_fed;
    ev.prompt_seconds = s.prompt_seconds >= 0 ? s.prompt_seconds : s.since_start.seconds();
}

void Engine::Impl::release(Slot& s) {
    const int id = int(&s - slots.data());
    s.recorder.reset();
    if (s.in_cache) cache->remove_sequence(id);
    if (!s.spilled_key.empty()) store->drop(s.spilled_key);
    reserved -= s.reserve;
    s = Slot{};
}

void Engine::Impl::final_event(const EventCallback& cb, TokenEvent ev) {
    {
        std::lock_guard<std::mutex> lk(mu);
        live.erase(ev.request_id);
        ++published.requests_finished;
    }
    if (cb) cb(ev);
}

/// Snapshot for stats() and slots().
void Engine::Impl::publish() {
    const KvMemory mem = cache->memory();
    std::int64_t pages = 0;
    std::vector<SlotInfo> infos;
    for (std::size_t id = 0; id < slots.size(); ++id) {
        const Slot& s = slots[id];
        SlotInfo si{int(id), s.phase, s.request_id, s.n_prompt, s.n_generated, s.request.max_tokens, s.n_cached, s.reserve,
                    s.tokens.empty() ? -1 : s.tokens.back()};
        infos.push_back(si);
        if (!s.in_cache) continue;
        for (int il = 0; il < cache->shape().n_layer; ++il) {
            std::set<std::int64_t> seen;
            for (const KvSpan& sp : cache->layout(int(id), il))
                if (sp.page >= 0) seen.insert(sp.page);
            pages += std::int64_t(seen.size());
        }
    }
    int active = 0;
    PromptCacheStats cached;
    if (store) cached = store->disk_cached_stats();
    for (const Slot& s : slots) {
        active += running(s);
        if (s.phase != SlotPhase::cached) continue;
        ++cached.sequences;
        cached.bytes_reserved += s.reserve;
    }
    std::lock_guard<std::mutex> lk(mu);
    cached.disk_hits = cache_disk_hits;
    cached.hits = cache_hits;
    cached.tokens_reused = cache_tokens_reused;
    cached.evictions = cache_evictions;
    published.prompt_cache = cached;
    published.active = active;
    published.queued = int(queue.size());
    published.kv_bytes_used = mem.bytes;
    published.kv_bytes_reserved = reserved;
    published.pages_in_use = pages;
    published.bits_per_element = mem.bits_per_element(cache->shape());
    published.model_scratch_bytes = model.scratch_bytes();
    published.cache_scratch_bytes = cache->scratch_bytes();
    published.requests_rejected = rejected;
    published_slots = std::move(infos);
}

}  // namespace aqpim::serve
