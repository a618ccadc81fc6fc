// The serving engine's admission: requests checked, reserved for their worst case and queued
// (any thread; docs/serve.md "Scheduler and admission").

#include <fmt/format.h>

#include <algorithm>

#include "aqpim/error.h"
#include "serve/engine_impl.h"

namespace aqpim::serve {

namespace {

constexpr int kMaxTopLogprobs = 20;

}  // namespace

SubmitResult Engine::Impl::reject(Rejection r, std::string message, std::uint64_t need) {
    std::lock_guard<std::mutex> lk(mu);
    ++rejected;
    SubmitResult res;
    res.rejection = r;
    res.message = std::move(message);
    res.needed_bytes = need;
    res.budget_bytes = opt.kv_budget_bytes;
    return res;
}

/// Empty when the request is well formed, else what is wrong.
std::string Engine::Impl::invalid_reason(const GenerationRequest& r) const {
    const int n_vocab = weights.config.n_vocab;
    if (r.resume_slot < 0 && r.prompt.empty()) return "the prompt has no tokens";
    if (r.resume_slot >= opt.parallel) return fmt::format("slot {} does not exist (slots 0..{})", r.resume_slot, opt.parallel - 1);
    for (std::int32_t t : r.prompt)
        if (t < 0 || t >= n_vocab) return fmt::format("prompt token id {} outside [0, {})", t, n_vocab);
    if (r.max_tokens < (r.prompt_logprobs ? 0 : 1))
        return fmt::format("max_tokens {} must be >= {}", r.max_tokens, r.prompt_logprobs ? 0 : 1);
    if (std::string why = r.processing.invalid_reason(n_vocab); !why.empty()) return why;
    const GuideVocabulary* guide = r.guide_vocabulary.get();
    if (guide && std::int64_t(guide->size()) != n_vocab)
        return fmt::format("the output constraint's vocabulary has {} token texts, the model {} tokens", guide->size(), n_vocab);
    if ((r.json_schema || r.regex || r.grammar) && !guide) return "a JSON schema, a regex or a grammar needs the constraint's vocabulary (guide_vocabulary)";
    if (int(bool(r.json_schema)) + int(bool(r.regex)) + int(bool(r.grammar)) > 1) return "a request takes one of a JSON schema, a regex and a grammar";
    if (guide && (r.resume_slot >= 0 || r.park)) return "an output constraint does not continue or park a sequence";
    if (guide && guide->eos() != opt.eos_token)
        return fmt::format("the output constraint's EOS is token {}, the engine's {}", guide->eos(), opt.eos_token);
    if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs)
        return fmt::format("top_logprobs {} outside [0, {}]", r.top_logprobs, kMaxTopLogprobs);
    if (std::int64_t(r.prompt.size()) + r.max_tokens > opt.ctx)
        return fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context of {} tokens", r.prompt.size(),
                           r.max_tokens, opt.ctx);
    for (const auto& s : r.stop_sequences)
        for (std::int32_t t : s)
            if (t < 0 || t >= n_vocab) return fmt::format("stop token id {} outside [0, {})", t, n_vocab);
    try {
        r.sampler.validate();
    } catch (const Error& e) {
        return e.what();
    }
    return {};
}

std::vector<SubmitResult> Engine::Impl::submit_all(std::vector<GenerationRequest> requests,
                                                   std::vector<EventCallback> callbacks) {
    const std::size_t k = requests.size();
    AQPIM_CHECK(k >= 1 && callbacks.size() == k, "submit_all: {} requests and {} callbacks", k, callbacks.size());
    const auto all = [k](const SubmitResult& r) { return std::vector<SubmitResult>(k, r); };
    std::vector<std::uint64_t> need(k, 0);
    for (std::size_t i = 0; i < k; ++i) {
        const GenerationRequest& request = requests[i];
        if (const std::string why = invalid_reason(request); !why.empty()) return all(reject(Rejection::invalid, why));
        if (request.resume_slot >= 0) continue;
        need[i] = reservation(std::int64_t(request.prompt.size()) + request.max_tokens);
        if (base_bytes + need[i] > opt.kv_budget_bytes)
            return all(reject(Rejection::never_fits,
                              fmt::format("the request needs {} bytes of KV ({} prompt + {} max_tokens under {}), more "
                                          "than the whole budget of {} bytes",
                                          need[i], request.prompt.size(), request.max_tokens, spec.text,
                                          opt.kv_budget_bytes - base_bytes),
                              need[i]));
    }
    if (int(k) > opt.queue_capacity + 1)
        return all(reject(Rejection::invalid, fmt::format("{} requests at once: the admission queue holds {} (--queue)",
                                                          k, opt.queue_capacity)));
    std::unique_lock<std::mutex> lk(mu);
    if (stopping) {
        lk.unlock();
        return all(reject(Rejection::queue_full, "the engine is stopping"));
    }
    // A request the next step admits (nothing ahead of it, an idle slot, room in the budget)
    // does not wait: queue_capacity 0 still serves while a slot and the bytes are free.
    // Cached sequences (the prompt cache) give their slots and bytes up to it.
    const bool idle_slot = std::any_of(published_slots.begin(), published_slots.end(), [](const SlotInfo& s) {
        return s.phase == SlotPhase::idle || s.phase == SlotPhase::cached;
    });
    const bool taken_now = queue.empty() && idle_slot && requests[0].resume_slot < 0 &&
                           published.kv_bytes_reserved - published.prompt_cache.bytes_reserved + need[0] <=
                               opt.kv_budget_bytes;
    if (int(queue.size() + k) > opt.queue_capacity + (taken_now ? 1 : 0)) {  // all or none
        lk.unlock();
        return all(reject(Rejection::queue_full, fmt::format("the queue is full ({} requests wait)", opt.queue_capacity)));
    }
    std::vector<SubmitResult> results(k);
    for (std::size_t i = 0; i < k; ++i) {
        results[i].request_id = next_id++;
        queue.push_back(Pending{results[i].request_id, std::move(requests[i]), std::move(callbacks[i]), need[i], Timer()});
        live.insert(results[i].request_id);
        ++published.requests_accepted;
    }
    lk.unlock();
    cv.notify_all();
    return results;
}

bool Engine::Impl::cancel(std::uint64_t id) {
    {
        std::lock_guard<std::mutex> lk(mu);
        if (!live.count(id)) return false;
        cancels.insert(id);
    }
    cv.notify_all();
    return true;
}

/// Run f on the scheduler thread between steps and wait for it (rethrowing its exception).
void Engine::Impl::on_scheduler(std::function<void()> f) {
    if (std::this_thread::get_id() == scheduler.get_id()) return f();
    std::packaged_task<void()> task(std::move(f));
    std::future<void> done = task.get_future();
    {
        std::lock_guard<std::mutex> lk(mu);
        AQPIM_CHECK(!stopping, "serve: the engine is stopping");
        tasks.push_back(std::move(task));
    }
    cv.notify_all();
    done.get();
}

}  // namespace aqpim::serve
