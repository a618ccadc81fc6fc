// The prefix store: chains of block entries over the tiers, looked up and recorded
// (docs/kv-store.md).

#include "store/prefix_store.h"

#include <fmt/format.h>

#include <mutex>

#include "aqpim/error.h"
#include "aqpim/hash.h"
#include "store/job_queue.h"
#include "store/warn_limiter.h"

namespace aqpim::store {

struct PrefixStore::Recorder::Chain {
    std::vector<BlockKey> keys;  ///< of the prompt's whole blocks
    BlockKey base;               ///< the key before block 0 (the namespace's, salted)
    int next = 0;                ///< the next block to record (caller's thread)
    bool broken = false;         ///< a state was dropped: record no more (caller's thread)
    // Set at the start, read on the write thread:
    int restored = 0;            ///< blocks the lookup restored
    int stored_mains = 0;        ///< blocks [0, stored_mains) are stored: their mains are never written again
    int want_tail = -1;          ///< a stored block without a tail where a chain ended: its tail is written
    int tail_every = kDefaultTailEvery;
    std::vector<StoredSplit> splits;  ///< of blocks [max(restored - 1, 0), stored_mains)
    // The write thread's:
    std::vector<std::uint8_t> prev;  ///< the state at the start of the next block
    struct Pending {
        StateDelta delta;
        BlockHeader header;
    };
    std::optional<Pending> pending;  ///< the last block diffed, written once the next one splits its tail off

    /// The stored split of block j, or null when this recorder writes it.
    const StoredSplit* stored_split(int j) const {
        const int first = std::max(restored - 1, 0);
        if (j < first || j >= stored_mains) return nullptr;
        return &splits[std::size_t(j - first)];
    }
};

struct PrefixStore::Impl {
    std::vector<std::unique_ptr<KvStore>> tiers;
    Options opt;
    BlockKey ns_key;
    WarnLimiter warn;
    mutable std::mutex mu;  // st
    PrefixStoreStats st;
    JobQueue writes;
    JobQueue fetches;

    Impl(std::vector<std::unique_ptr<KvStore>> t, Options o)
        : tiers(std::move(t)), opt(std::move(o)), ns_key(namespace_key(opt.ns)), warn(opt.warn),
          writes(opt.write_queue_bytes, JobQueue::AtEnd::finish), fetches(~std::uint64_t(0), JobQueue::AtEnd::drop) {}

    int block() const { return opt.ns.block_tokens; }

    /// Keys of the first n whole blocks of prompt, in the space of `salt`; the key before block 0
    /// in base.
    std::vector<BlockKey> keys(std::span<const std::int32_t> prompt, std::size_t n, const std::string& salt,
                               BlockKey* base = nullptr) const {
        std::vector<BlockKey> k;
        BlockKey prev = salted_key(ns_key, salt);
        if (base) *base = prev;
        for (std::size_t j = 0; j < n; ++j) {
            prev = next_block_key(prev, prompt.subspan(j * std::size_t(block()), std::size_t(block())));
            k.push_back(prev);
        }
        return k;
    }

    void count(std::uint64_t PrefixStoreStats::*field, std::uint64_t n = 1) {
        std::lock_guard<std::mutex> lk(mu);
        st.*field += n;
    }

    /// A bad entry: counted, dropped from the tier it came from, and said (rate-limited).
    void reject(bool corrupt, std::size_t tier, const std::string& name, const std::string& why) {
        count(corrupt ? &PrefixStoreStats::rejected_corrupt : &PrefixStoreStats::rejected_foreign);
        tiers[tier]->remove(name);
        warn(fmt::format("kv store {}: entry {} ignored: {}", tiers[tier]->stats().where, name, why));
    }

    /// Empty when block j's header fits the chain (whose key before block 0 is base), else what does not.
    std::string foreign_reason(const BlockHeader& h, std::size_t j, const std::vector<BlockKey>& k, const BlockKey& base,
                               std::uint64_t parent_bytes) const {
        if (h.model_fingerprint != opt.ns.model_fingerprint)
            return fmt::format("model {:016x}, not {:016x}", h.model_fingerprint, opt.ns.model_fingerprint);
        if (!(h.key == k[j])) return "its key is not the one it is stored under";
        if (!(h.parent == (j == 0 ? base : k[j - 1]))) return "its parent is not the block before it";
        if (h.index != j || h.block_tokens != std::uint32_t(block()))
            return fmt::format("block {} of {} tokens, not block {} of {}", h.index, h.block_tokens, j, block());
        if (h.parent_bytes != parent_bytes) return fmt::format("written against {} bytes, not {}", h.parent_bytes, parent_bytes);
        return {};
    }

    /// The value of `name` from the first tier that has it (copied into the tiers before it), and
    /// that tier.
    std::optional<std::pair<Bytes, std::size_t>> get_first(const std::string& name) {
        for (std::size_t t = 0; t < tiers.size(); ++t)
            if (std::optional<Bytes> v = tiers[t]->get_one(name)) {
                for (std::size_t u = 0; u < t; ++u) tiers[u]->put(name, *v);
                return std::pair{std::move(*v), t};
            }
        return std::nullopt;
    }

    /// The main entries of the first n blocks, from the first tier that has each (a whole chain per
    /// tier in one round trip), and the tier each came from.
    std::vector<std::pair<std::optional<Bytes>, std::size_t>> fetch_mains(const std::vector<BlockKey>& k) {
        std::vector<std::pair<std::optional<Bytes>, std::size_t>> found(k.size());
        for (std::size_t t = 0; t < tiers.size(); ++t) {
            std::vector<std::size_t> want;
            std::vector<std::string> names;
            for (std::size_t j = 0; j < k.size(); ++j)
                if (!found[j].first) want.push_back(j), names.push_back(main_entry_name(k[j]));
            if (want.empty()) break;
            std::vector<std::optional<Bytes>> got = tiers[t]->get(names);
            for (std::size_t i = 0; i < want.size(); ++i)
                if (got[i]) found[want[i]] = {std::move(got[i]), t};
        }
        return found;
    }

    PrefixHit lookup(std::span<const std::int32_t> prompt, const std::string& salt) {
        count(&PrefixStoreStats::lookups);
        PrefixHit hit;
        const std::size_t n = prompt.empty() ? 0 : (prompt.size() - 1) / std::size_t(block());
        if (n == 0) return hit;
        BlockKey base;
        const std::vector<BlockKey> k = keys(prompt, n, salt, &base);
        auto found = fetch_mains(k);

        // The valid main entries from block 0, in order.
        std::vector<DecodedBlock> chain;
        for (std::size_t j = 0; j < n && found[j].first; ++j) {
            const auto& [bytes, tier] = found[j];
            DecodedBlock b;
            try {
                b = decode_block(*bytes);
            } catch (const Error& e) {
                reject(true, tier, main_entry_name(k[j]), e.what());
                break;
            }
            const std::string why = foreign_reason(b.header, j, k, base, j == 0 ? 0 : chain.back().header.state_bytes);
            if (!why.empty()) {
                reject(false, tier, main_entry_name(k[j]), why);
                break;
            }
            if (b.header.state_bytes > opt.max_state_bytes) break;  // valid, but larger than this server takes
            for (std::size_t u = 0; u < tier; ++u) tiers[u]->put(main_entry_name(k[j]), *bytes);
            chain.push_back(std::move(b));
        }
        // How far they compose: a malformed block (its checksum held: hostile) is dropped, an
        // inconsistent one (two writers split its parent differently) ends the chain and is written
        // again by the recorder.
        std::vector<DeltaView> views;
        for (const DecodedBlock& b : chain) views.push_back({b.ops, b.lasting, {}, b.header.tail_bytes, b.header.parent_bytes});
        const ChainCheck check = check_chain(views, opt.max_state_bytes);
        if (!check.why.empty())
            reject(true, found[check.bad_block].second, main_entry_name(k[check.bad_block]), check.why);
        else if (check.consistent < chain.size())
            count(&PrefixStoreStats::inconsistent);
        chain.resize(check.consistent);
        views.resize(check.consistent);
        hit.mains_found = int(check.consistent);

        // The deepest block whose tail is at hand ends the chain: the deepest found (where a tail
        // is written lazily), then those stored with their tail or needing none.
        std::optional<Bytes> tail;
        std::size_t end = chain.size();
        for (; end > 0; --end) {
            const BlockHeader& h = chain[end - 1].header;
            if (h.tail_bytes == 0) break;
            if (end < chain.size() && !(h.flags & BlockHeader::kTailStored)) continue;
            const std::string name = tail_entry_name(k[end - 1]);
            auto got = get_first(name);
            if (!got) continue;
            if (got->first.size() == h.tail_bytes && xxh64(got->first.data(), got->first.size()) == h.tail_checksum) {
                tail = std::move(got->first);
                break;
            }
            reject(true, got->second, name, "the tail's size or checksum is not what its block states");
        }
        const std::size_t first_split = end > 0 ? end - 1 : 0;
        for (std::size_t j = first_split; j < chain.size(); ++j)
            hit.splits.push_back({chain[j].ops, std::uint64_t(chain[j].lasting.size()), chain[j].header.tail_bytes,
                                  chain[j].header.tail_checksum});
        if (end == 0) return hit;
        views.resize(end);
        if (tail) views.back().tail = *tail;
        const BlockHeader& last = chain[end - 1].header;
        try {
            hit.state = compose_chain(views, opt.max_state_bytes);
        } catch (const Error& e) {
            count(&PrefixStoreStats::rejected_corrupt);
            warn(fmt::format("kv store: a chain of {} blocks ignored: {}", end, e.what()));
            return PrefixHit{};
        }
        if (hit.state.size() != last.state_bytes || xxh64(hit.state.data(), hit.state.size()) != last.state_checksum) {
            count(&PrefixStoreStats::rejected_corrupt);
            warn(fmt::format("kv store: a chain of {} blocks ignored: its state's checksum differs", end));
            return PrefixHit{};
        }
        hit.blocks = int(end);
        hit.n_tokens = std::int64_t(end) * block();
        std::uint64_t fetched = tail ? tail->size() : 0;
        for (std::size_t j = 0; j < end; ++j) fetched += found[j].first->size();
        std::lock_guard<std::mutex> lk(mu);
        ++st.lookup_hits;
        st.blocks_restored += std::uint64_t(hit.blocks);
        st.tokens_restored += std::uint64_t(hit.n_tokens);
        st.bytes_fetched += fetched;
        return hit;
    }

    void put_all(const std::string& name, std::span<const std::uint8_t> bytes) {
        for (auto& t : tiers) t->put(name, bytes);
    }

    /// Write a diffed block to every tier, with its tail entry or without it (then a chain cannot
    /// end at this block until a tail is written); the tail first, so that a reader who finds the
    /// main entry finds its tail (or, if it was evicted since, falls back a block).
    void write(Recorder::Chain::Pending& p, bool with_tail) {
        with_tail = with_tail && p.delta.lasting_bytes < p.delta.literals.size();
        if (with_tail) p.header.flags |= BlockHeader::kTailStored;
        const EncodedBlock e = encode_block(p.header, p.delta);
        if (with_tail) put_all(tail_entry_name(p.header.key), e.tail);
        put_all(main_entry_name(p.header.key), e.main);
        std::lock_guard<std::mutex> lk(mu);
        ++st.blocks_stored;
        st.bytes_stored += e.main.size() + (with_tail ? e.tail.size() : 0);
    }

    /// Block `index`'s state reached the write thread.
    void record(Recorder::Chain& c, int index, const std::vector<std::uint8_t>& state) {
        // The parent's stored split, if the store holds the parent: copy none of its tail.
        const StoredSplit* parent = c.stored_split(index - 1);
        const std::vector<ByteRange> forbidden =
            parent ? tail_ranges(parent->ops, parent->lasting_bytes) : std::vector<ByteRange>{};
        Recorder::Chain::Pending next;
        next.delta = diff_states(c.prev, state, forbidden);
        if (c.pending) {
            split_lasting(c.pending->delta, next.delta);
            const int j = int(c.pending->header.index);
            write(*c.pending, (j + 1) % c.tail_every == 0);
            c.pending.reset();
        }
        if (const StoredSplit* own = c.stored_split(index)) {
            // Stored already, never rewritten (its split is the one later blocks rely on); its tail,
            // where a chain was found to end, is cut from this state.
            if (index == c.want_tail && own->tail_bytes > 0) {
                const std::vector<std::uint8_t> t = tail_of(own->ops, own->lasting_bytes, own->tail_bytes, state);
                if (xxh64(t.data(), t.size()) == own->tail_checksum) put_all(tail_entry_name(c.keys[std::size_t(index)]), t);
            }
        } else {
            BlockHeader& h = next.header;
            h.model_fingerprint = opt.ns.model_fingerprint;
            h.key = c.keys[std::size_t(index)];
            h.parent = index == 0 ? c.base : c.keys[std::size_t(index) - 1];
            h.index = std::uint32_t(index);
            h.block_tokens = std::uint32_t(block());
            h.state_checksum = xxh64(state.data(), state.size());
            c.pending = std::move(next);
        }
        c.prev = state;
    }
};

PrefixStore::PrefixStore(std::vector<std::unique_ptr<KvStore>> tiers, Options options) {
    AQPIM_CHECK(!tiers.empty(), "kv store: no tier");
    AQPIM_CHECK(options.ns.block_tokens > 0, "kv store: block of {} tokens", options.ns.block_tokens);
    AQPIM_CHECK(options.tail_every > 0, "kv store: a tail every {} blocks", options.tail_every);
    impl_ = std::make_unique<Impl>(std::move(tiers), std::move(options));
}
PrefixStore::~PrefixStore() = default;  // the queues end before the tiers go

int PrefixStore::block_tokens() const { return impl_->block(); }
const StoreNamespace& PrefixStore::ns() const { return impl_->opt.ns; }

PrefixHit PrefixStore::lookup(std::span<const std::int32_t> prompt, const std::string& salt) {
    return impl_->lookup(prompt, salt);
}

void PrefixStore::lookup_async(std::vector<std::int32_t> prompt, std::string salt, std::function<void(PrefixHit)> done) {
    Impl* impl = impl_.get();
    impl->fetches.push([impl, prompt = std::move(prompt), salt = std::move(salt), done = std::move(done)] {
        PrefixHit hit;
        try {
            hit = impl->lookup(prompt, salt);
        } catch (const std::exception& e) {  // out of memory composing, a bug: the request prefills
            impl->warn(fmt::format("kv store: lookup failed: {}", e.what()));
        }
        done(std::move(hit));
    });
}

std::unique_ptr<PrefixStore::Recorder> PrefixStore::recorder(std::span<const std::int32_t> prompt, const std::string& salt,
                                                             PrefixHit found) {
    auto c = std::make_shared<Recorder::Chain>();
    c->keys = impl_->keys(prompt, prompt.size() / std::size_t(impl_->block()), salt, &c->base);
    c->tail_every = impl_->opt.tail_every;
    c->next = c->restored = found.blocks;
    c->prev = std::move(found.state);
    c->stored_mains = std::min(found.mains_found, int(c->keys.size()));
    c->splits = std::move(found.splits);
    AQPIM_ASSERT(int(c->splits.size()) >= found.mains_found - std::max(found.blocks - 1, 0));
    if (found.mains_found > found.blocks) c->want_tail = found.mains_found - 1;
    return std::unique_ptr<Recorder>(new Recorder(*this, std::move(c)));
}

PrefixStore::Recorder::Recorder(PrefixStore& store, std::shared_ptr<Chain> chain)
    : store_(store), chain_(std::move(chain)) {}

PrefixStore::Recorder::~Recorder() { finish(); }

bool PrefixStore::Recorder::wants(std::int64_t n_tokens) const {
    return !finished_ && !chain_->broken && chain_->next < int(chain_->keys.size()) &&
           n_tokens == std::int64_t(chain_->next + 1) * store_.block_tokens();
}

void PrefixStore::Recorder::record(std::vector<std::uint8_t> state) {
    AQPIM_ASSERT(!finished_ && !chain_->broken && chain_->next < int(chain_->keys.size()));
    const int index = chain_->next++;
    const std::uint64_t bytes = state.size();
    auto held = std::make_shared<std::vector<std::uint8_t>>(std::move(state));
    Impl& impl = *store_.impl_;
    const bool queued = impl.writes.push(
        [&impl, c = chain_, index, held] {
            try {
                impl.record(*c, index, *held);
            } catch (const std::exception& e) {
                impl.warn(fmt::format("kv store: block {} not written: {}", index, e.what()));
            }
        },
        bytes);
    if (!queued) {
        chain_->broken = true;
        impl.count(&PrefixStoreStats::recordings_dropped);
    }
}

void PrefixStore::Recorder::finish() {
    if (finished_) return;
    finished_ = true;
    Impl& impl = *store_.impl_;
    impl.writes.push([&impl, c = chain_] {
        try {
            if (c->pending) impl.write(*c->pending, true);  // the prompt's last block: a chain may end here
        } catch (const std::exception& e) {
            impl.warn(fmt::format("kv store: a block not written: {}", e.what()));
        }
        c->pending.reset();
        c->prev.clear();
    });
}

PrefixStoreStats PrefixStore::stats() const {
    PrefixStoreStats s;
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        s = impl_->st;
    }
    for (const auto& t : impl_->tiers) s.tiers.push_back(t->stats());
    return s;
}

void PrefixStore::flush() {
    impl_->fetches.flush();
    impl_->writes.flush();
}

std::vector<std::uint64_t> PrefixStore::reported_bytes(std::span<const std::int32_t> prompt, const std::string& salt) {
    const std::vector<BlockKey> k = impl_->keys(prompt, prompt.size() / std::size_t(impl_->block()), salt);
    std::vector<std::uint64_t> out;
    for (const auto& t : impl_->tiers) {
        std::uint64_t sum = 0;
        for (const BlockKey& key : k)
            for (const std::string& name : {main_entry_name(key), tail_entry_name(key)}) sum += t->reported_bytes(name).value_or(0);
        out.push_back(sum);
    }
    return out;
}

}  // namespace aqpim::store
