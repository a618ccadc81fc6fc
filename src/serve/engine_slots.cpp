// The serving engine's slots: save a sequence to a kv state file, restore one into an idle slot,
// release a parked one (on the scheduler thread; docs/serve.md, docs/kv-state.md).

#include <algorithm>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "serve/engine_impl.h"

namespace aqpim::serve {

const ModelIdentity& Engine::Impl::model_id() {
    if (!identity) identity = model_identity(weights);
    return *identity;
}

Engine::Impl::Slot& Engine::Impl::slot_at(int id) {
    AQPIM_CHECK(id >= 0 && id < opt.parallel, "serve: slot {} does not exist (slots 0..{})", id, opt.parallel - 1);
    return slots[std::size_t(id)];
}

void Engine::Impl::save(int id, const std::string& path) {
    Slot& s = slot_at(id);
    if (s.phase == SlotPhase::spilled) {  // its state on disk is what a save writes
        const std::vector<std::uint8_t> bytes = store->spilled_state(s.spilled_key, false);
        write_output_file(path, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, "slot save");
        return;
    }
    AQPIM_CHECK(s.in_cache && s.n_cached > 0, "serve: slot {} holds no sequence to save ({})", id, slot_phase_name(s.phase));
    SlotState st;
    st.tokens = s.tokens;
    st.n_cached = s.n_cached;
    if (s.sampler) st.sampler = s.sampler->state();
    save_kv_state_file(path, *cache, id, st, model_id(), opt.ctx);
}

void Engine::Impl::restore(int id, const std::string& path) {
    Slot& s = slot_at(id);
    AQPIM_CHECK(s.phase == SlotPhase::idle || s.phase == SlotPhase::cached, "serve: slot {} is {}, not idle: release it first",
                id, slot_phase_name(s.phase));
    const std::vector<std::uint8_t> bytes = read_kv_state_file(path);
    const KvStateInfo info = read_kv_state_info(bytes);
    // Everything that can refuse the state is checked before anything is given up for its room.
    check_kv_state_target(info, *cache, model_id());
    AQPIM_CHECK(std::int64_t(info.slot.tokens.size()) >= info.slot.n_cached,
                "serve: {} holds {} cached tokens and {} token ids: a slot continues a sequence from its ids", path,
                info.slot.n_cached, info.slot.tokens.size());
    const std::uint64_t need = reservation(std::max<std::int64_t>(1, std::int64_t(info.slot.tokens.size())));
    // The prompt cache's sequences give their room up, this slot's first, then the least recently used.
    const std::uint64_t own = s.phase == SlotPhase::cached ? s.reserve : 0;
    std::uint64_t cached_room = 0;
    for (const Slot& c : slots)
        if (c.phase == SlotPhase::cached && &c != &s) cached_room += c.reserve;
    AQPIM_CHECK(reserved - own - cached_room + need <= opt.kv_budget_bytes,
                "serve: restoring {} into slot {} needs {} bytes of KV; {} of the budget's {} are reserved by running "
                "and parked sequences", path, id, need, reserved - own - cached_room, opt.kv_budget_bytes);
    for (Slot* v; reserved - own + need > opt.kv_budget_bytes && (v = oldest_cached(id));) {
        drop_cached(*v);
        ++cache_evictions;
    }
    if (s.phase == SlotPhase::cached) drop_cached(s);
    SlotState st = restore_kv_state(bytes, *cache, id, model_id());
    s = Slot{};
    s.in_cache = true;
    s.phase = SlotPhase::parked;
    s.tokens = std::move(st.tokens);
    s.n_cached = st.n_cached;
    if (st.sampler) s.sampler = std::make_unique<Sampler>(*st.sampler);
    s.reserve = need;
    reserved += need;
}

void Engine::Impl::release_parked(int id) {
    Slot& s = slot_at(id);
    AQPIM_CHECK(s.phase == SlotPhase::parked || s.phase == SlotPhase::spilled || s.phase == SlotPhase::cached,
                "serve: slot {} is {}, not parked or cached", id, slot_phase_name(s.phase));
    release(s);
}

}  // namespace aqpim::serve
