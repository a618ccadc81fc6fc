// The serving engine: construction and the public API over Engine::Impl (docs/serve.md; the
// admission, scheduler and slot parts are in engine_submit.cpp, engine_scheduler.cpp and
// engine_slots.cpp).

#include "serve/engine.h"

#include <mutex>

#include "aqpim/kv_pq.h"
#include "serve/engine_impl.h"

namespace aqpim::serve {

namespace {

Histogram make_histogram(std::vector<double> bounds) {
    Histogram h;
    h.bounds = std::move(bounds);
    h.counts.assign(h.bounds.size() + 1, 0);
    return h;
}

}  // namespace

Engine::Impl::Impl(const ModelWeights& w, const EngineOptions& o)
    : weights(w), opt(o), spec(parse_kv_scheme(o.kv)), model(w, o.threads) {
    opt.validate();
    if (opt.ctx == 0) opt.ctx = w.config.n_ctx_train > 0 ? w.config.n_ctx_train : 2048;
    cache_options.memory_budget = opt.kv_budget_bytes;
    cache_options.context = opt.ctx;
    cache = make_kv_cache(spec, model.kv_shape(), cache_options);
    base_bytes = cache->memory().bytes;
    reserved = base_bytes;
    reservation(1);  // a scheme that cannot size its sequences fails here, not at the first request
    if (!opt.kv_store.empty())
        store = std::make_unique<EngineStore>(opt, *cache, model_id(), [this] {
            { std::lock_guard<std::mutex> lk(mu); }  // the scheduler is waiting, or will see the result
            cv.notify_all();
        });
    slots.resize(std::size_t(opt.parallel));
    published.ttft = make_histogram({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
    published.tpot = make_histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
    published.kv_budget_bytes = opt.kv_budget_bytes;
    publish();
    scheduler = std::thread([this] { run(); });
}

std::uint64_t Engine::Impl::reservation(std::int64_t n) const {
    if (spec.name != "pq") return cache->sequence_bytes(n);
    // pq_capacity solves the bits= budget at n tokens (milliseconds of CPU, taken from the
    // scheduler's cores), and every request of one length gets the same answer: once per length.
    std::lock_guard<std::mutex> lk(reservation_mu);
    if (const auto it = pq_reservations.find(n); it != pq_reservations.end()) return it->second;
    const std::uint64_t bytes = pq_capacity(spec, model.kv_shape(), n, opt.kv_budget_bytes, cache_options).peak_bytes;
    if (pq_reservations.size() >= kMaxRememberedReservations) pq_reservations.clear();
    pq_reservations.emplace(n, bytes);
    return bytes;
}

Engine::Impl::~Impl() {
    {
        std::lock_guard<std::mutex> lk(mu);
        stopping = true;
    }
    cv.notify_all();
    if (scheduler.joinable()) scheduler.join();
    for (Slot& s : slots) s.recorder.reset();  // their last blocks are queued before the store goes
    store.reset();  // its threads end before the mutex their callbacks take
}

Engine::Engine(const ModelWeights& weights, const EngineOptions& options)
    : impl_(std::make_unique<Impl>(weights, options)) {}
Engine::~Engine() = default;

SubmitResult Engine::submit(GenerationRequest request, EventCallback on_event) {
    std::vector<GenerationRequest> r(1);
    r[0] = std::move(request);
    std::vector<EventCallback> cb(1);
    cb[0] = std::move(on_event);
    return impl_->submit_all(std::move(r), std::move(cb))[0];
}

std::vector<SubmitResult> Engine::submit_all(std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) {
    return impl_->submit_all(std::move(requests), std::move(callbacks));
}
bool Engine::cancel(std::uint64_t request_id) { return impl_->cancel(request_id); }

EngineStats Engine::stats() const {
    EngineStats s;
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        s = impl_->published;
        s.queued = int(impl_->queue.size());
        s.requests_rejected = impl_->rejected;
    }
    if (impl_->store) s.store = impl_->store->stats();  // live: the store writes on its own thread
    return s;
}

std::vector<SlotInfo> Engine::slots() const {
    std::lock_guard<std::mutex> lk(impl_->mu);
    return impl_->published_slots;
}

void Engine::save_slot(int slot_id, const std::string& path) {
    impl_->on_scheduler([&] { impl_->save(slot_id, path); });
}
void Engine::restore_slot(int slot_id, const std::string& path) {
    impl_->on_scheduler([&] {
        impl_->restore(slot_id, path);
        impl_->publish();
    });
}
void Engine::release_slot(int slot_id) {
    impl_->on_scheduler([&] {
        impl_->release_parked(slot_id);
        impl_->publish();
    });
}

const EngineOptions& Engine::options() const { return impl_->opt; }
void Engine::flush_store() {
    if (impl_->store) impl_->store->flush();
}
std::vector<std::uint64_t> Engine::store_reported_bytes(std::span<const std::int32_t> prompt) {
    return impl_->store ? impl_->store->reported_bytes(prompt) : std::vector<std::uint64_t>{};
}
std::uint64_t Engine::reservation_bytes(std::int64_t n_tokens) const { return impl_->reservation(n_tokens); }

}  // namespace aqpim::serve
