#pragma once
// Helpers for the serving engine's tests: a request's events collected until its final event.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "serve/engine.h"

namespace aqpim::test {

/// Every event of one request; wait() blocks until the final one.
struct Collected {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<serve::TokenEvent> events;
    bool done = false;

    std::vector<std::int32_t> tokens() {
        wait();
        std::vector<std::int32_t> t;
        for (const auto& e : events)
            if (e.finish == serve::FinishReason::none && e.token >= 0) t.push_back(e.token);  // not the prompt's scores
        return t;
    }
    serve::TokenEvent final_event() {
        wait();
        return events.back();
    }
    void wait() {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return done; });
    }
};

/// Release every sequence the prompt cache keeps (EngineOptions::cache_prompt); returns how many.
/// What the engine holds afterwards, requests hold: the pool is empty once they are done.
inline int drop_prompt_cache(serve::Engine& engine) {
    int n = 0;
    for (const serve::SlotInfo& s : engine.slots())
        if (s.phase == serve::SlotPhase::cached) {
            engine.release_slot(s.id);
            ++n;
        }
    return n;
}

/// Submit r; the events go to the returned collector. `stop_after`: the callback asks to stop once
/// that many tokens arrived (0: never).
inline std::shared_ptr<Collected> submit_collect(serve::Engine& engine, const serve::GenerationRequest& r,
                                                 serve::SubmitResult* result = nullptr, int stop_after = 0) {
    auto c = std::make_shared<Collected>();
    const serve::SubmitResult res = engine.submit(r, [c, stop_after](const serve::TokenEvent& e) {
        std::lock_guard<std::mutex> lk(c->mu);
        c->events.push_back(e);
        if (e.finish != serve::FinishReason::none) {
            c->done = true;
            c->cv.notify_all();
        }
        return stop_after > 0 && e.n_generated >= stop_after;
    });
    if (result) *result = res;
    if (!res.ok()) {
        std::lock_guard<std::mutex> lk(c->mu);
        c->done = true;
    }
    return c;
}

/// A prompt of n tokens: BOS (1) then ids drawn from [3, n_vocab) by a fixed rule of `salt`.
inline std::vector<std::int32_t> test_prompt(int n, int salt, int n_vocab) {
    std::vector<std::int32_t> p{1};
    for (int i = 1; i < n; ++i) p.push_back(3 + std::int32_t((std::uint64_t(i) * 2654435761u + salt * 40503u) % (n_vocab - 3)));
    return p;
}

}  // namespace aqpim::test
