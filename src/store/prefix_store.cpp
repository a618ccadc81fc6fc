// The prefix store: chains of block entries over the tiers, looked up and recorded
// (docs/kv-store.md).

#include "store/prefix_store.h"

#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "aqpim/error.h"
#include "aqpim/hash.h"

namespace aqpim::store {

namespace {

/// One thread running jobs in order; a job may carry bytes counted against a bound until it ends.
class JobQueue {
public:
    explicit JobQueue(std::uint64_t max_bytes) : max_bytes_(max_bytes), thread_([this] { run(); }) {}
    ~JobQueue() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stopping_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    /// False (nothing queued) when `bytes` more would pass the bound.
    bool push(std::function<void()> job, std::uint64_t bytes = 0) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (bytes > 0 && held_ + bytes > max_bytes_) return false;
            held_ += bytes;
            jobs_.push_back({std::move(job), bytes});
        }
        cv_.notify_all();
        return true;
    }
    void flush() {
        std::unique_lock<std::mutex> lk(mu_);
        idle_.wait(lk, [&] { return jobs_.empty() && !running_; });
    }

private:
    struct Job {
        std::function<void()> run;
        std::uint64_t bytes = 0;
    };
    void run() {
        for (;;) {
            Job job;
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
                if (jobs_.empty()) return;  // stopping, and every job done
                job = std::move(jobs_.front());
                jobs_.pop_front();
                running_ = true;
            }
            job.run();  // jobs catch their own errors
            {
                std::lock_guard<std::mutex> lk(mu_);
                held_ -= job.bytes;
                running_ = false;
            }
            idle_.notify_all();
        }
    }
    std::uint64_t max_bytes_, held_ = 0;
    std::mutex mu_;
    std::condition_variable cv_, idle_;
    std::deque<Job> jobs_;
    bool stopping_ = false, running_ = false;
    std::thread thread_;
};

}  // namespace

struct PrefixStore::Recorder::Chain {
    std::vector<BlockKey> keys;  ///< of the prompt's whole blocks
    int next = 0;                ///< the next block to record (caller's thread)
    bool broken = false;         ///< a state was dropped: record no more (caller's thread)
    int stored_mains = 0;        ///< blocks whose main entries the lookup found: not written again ...
    int want_tail = -1;          ///< ... except this one, the chain's end, written with its tail
    int tail_every = kDefaultTailEvery;
    // The write thread's:
    std::vector<std::uint8_t> prev;  ///< the state at the start of the next block
    struct Pending {
        StateDelta delta;
        BlockHeader header;
    };
    std::optional<Pending> pending;  ///< the last block diffed, written once the next one splits its tail off
};

struct PrefixStore::Impl {
    std::vector<std::unique_ptr<KvStore>> tiers;
    Options opt;
    BlockKey ns_key;
    mutable std::mutex mu;  // st
    PrefixStoreStats st;
    JobQueue writes;
    JobQueue fetches;

    Impl(std::vector<std::unique_ptr<KvStore>> t, Options o)
        : tiers(std::move(t)), opt(std::move(o)), ns_key(namespace_key(opt.ns)), writes(opt.write_queue_bytes),
          fetches(~std::uint64_t(0)) {}

    int block() const { return opt.ns.block_tokens; }

    /// Keys of the first n whole blocks of prompt.
    std::vector<BlockKey> keys(std::span<const std::int32_t> prompt, std::size_t n) const {
        std::vector<BlockKey> k;
        BlockKey prev = ns_key;
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

    /// A bad entry: counted, dropped from the tier it came from, and said once.
    void reject(bool corrupt, std::size_t tier, const std::string& name, const std::string& why) {
        count(corrupt ? &PrefixStoreStats::rejected_corrupt : &PrefixStoreStats::rejected_foreign);
        tiers[tier]->remove(name);
        if (opt.warn) opt.warn(fmt::format("kv store {}: entry {} ignored: {}", tiers[tier]->stats().where, name, why));
    }

    /// Empty when block j's header fits the chain, else what does not.
    std::string foreign_reason(const BlockHeader& h, std::size_t j, const std::vector<BlockKey>& k,
                               std::uint64_t parent_bytes) const {
        if (h.model_fingerprint != opt.ns.model_fingerprint)
            return fmt::format("model {:016x}, not {:016x}", h.model_fingerprint, opt.ns.model_fingerprint);
        if (!(h.key == k[j])) return "its key is not the one it is stored under";
        if (!(h.parent == (j == 0 ? ns_key : k[j - 1]))) return "its parent is not the block before it";
        if (h.index != j || h.block_tokens != std::uint32_t(block()))
            return fmt::format("block {} of {} tokens, not block {} of {}", h.index, h.block_tokens, j, block());
        if (h.parent_bytes != parent_bytes) return fmt::format("written against {} bytes, not {}", h.parent_bytes, parent_bytes);
        if (h.state_bytes > opt.max_state_bytes)
            return fmt::format("a state of {} bytes (at most {})", h.state_bytes, opt.max_state_bytes);
        return {};
    }

    /// The value of `name` from the first tier that has it (copied into the tiers before it).
    std::optional<Bytes> get_first(const std::string& name) {
        for (std::size_t t = 0; t < tiers.size(); ++t)
            if (std::optional<Bytes> v = tiers[t]->get_one(name)) {
                for (std::size_t u = 0; u < t; ++u) tiers[u]->put(name, *v);
                return v;
            }
        return std::nullopt;
    }

    PrefixHit lookup(std::span<const std::int32_t> prompt) {
        count(&PrefixStoreStats::lookups);
        PrefixHit hit;
        const std::size_t n = prompt.empty() ? 0 : (prompt.size() - 1) / std::size_t(block());
        if (n == 0) return hit;
        const std::vector<BlockKey> k = keys(prompt, n);
        std::vector<std::optional<Bytes>> found(n);
        std::vector<std::size_t> from(n, 0);
        for (std::size_t t = 0; t < tiers.size(); ++t) {
            std::vector<std::size_t> want;
            std::vector<std::string> names;
            for (std::size_t j = 0; j < n; ++j)
                if (!found[j]) want.push_back(j), names.push_back(main_entry_name(k[j]));
            if (want.empty()) break;
            std::vector<std::optional<Bytes>> got = tiers[t]->get(names);
            for (std::size_t i = 0; i < want.size(); ++i)
                if (got[i]) found[want[i]] = std::move(got[i]), from[want[i]] = t;
        }
        std::vector<DecodedBlock> chain;
        std::uint64_t fetched = 0;
        for (std::size_t j = 0; j < n && found[j]; ++j) {
            DecodedBlock b;
            try {
                b = decode_block(*found[j]);
            } catch (const Error& e) {
                reject(true, from[j], main_entry_name(k[j]), e.what());
                break;
            }
            const std::string why = foreign_reason(b.header, j, k, j == 0 ? 0 : chain.back().header.state_bytes);
            if (!why.empty()) {
                reject(false, from[j], main_entry_name(k[j]), why);
                break;
            }
            for (std::size_t u = 0; u < from[j]; ++u) tiers[u]->put(main_entry_name(k[j]), *found[j]);
            fetched += found[j]->size();
            chain.push_back(std::move(b));
        }
        // The last block's tail (a restore stops there); without it, the chain ends one block earlier.
        hit.mains_found = int(chain.size());
        std::optional<Bytes> tail;
        while (!chain.empty()) {
            const BlockHeader& h = chain.back().header;
            if (h.tail_bytes == 0) break;
            const std::string name = tail_entry_name(k[chain.size() - 1]);
            tail = get_first(name);
            if (tail && tail->size() == h.tail_bytes && xxh64(tail->data(), tail->size()) == h.tail_checksum) break;
            if (tail) {
                count(&PrefixStoreStats::rejected_corrupt);
                for (auto& t : tiers) t->remove(name);
            }
            tail.reset();
            fetched -= found[chain.size() - 1]->size();
            chain.pop_back();
        }
        if (chain.empty()) return hit;
        std::vector<DeltaView> views;
        for (std::size_t j = 0; j < chain.size(); ++j) {
            const DecodedBlock& b = chain[j];
            DeltaView v{b.ops, b.lasting, {}, b.header.tail_bytes, b.header.parent_bytes};
            if (j + 1 == chain.size() && tail) v.tail = *tail;
            views.push_back(v);
        }
        const BlockHeader& last = chain.back().header;
        try {
            hit.state = compose_chain(views, opt.max_state_bytes);
        } catch (const Error& e) {
            count(&PrefixStoreStats::rejected_corrupt);
            if (opt.warn) opt.warn(fmt::format("kv store: a chain of {} blocks ignored: {}", chain.size(), e.what()));
            return PrefixHit{};
        }
        if (hit.state.size() != last.state_bytes || xxh64(hit.state.data(), hit.state.size()) != last.state_checksum) {
            count(&PrefixStoreStats::rejected_corrupt);
            if (opt.warn) opt.warn(fmt::format("kv store: a chain of {} blocks ignored: its state's checksum differs", chain.size()));
            return PrefixHit{};
        }
        hit.blocks = int(chain.size());
        hit.n_tokens = std::int64_t(chain.size()) * block();
        std::lock_guard<std::mutex> lk(mu);
        ++st.lookup_hits;
        st.blocks_restored += std::uint64_t(hit.blocks);
        st.tokens_restored += std::uint64_t(hit.n_tokens);
        st.bytes_fetched += fetched + (tail ? tail->size() : 0);
        return hit;
    }

    /// Write a diffed block to every tier, with its tail entry or without it (then a chain cannot
    /// end at this block until a tail is written); the tail first, so that a reader who finds the
    /// main entry finds its tail (or, if it was evicted since, falls back a block).
    void write(const Recorder::Chain::Pending& p, bool with_tail) {
        const EncodedBlock e = encode_block(p.header, p.delta);
        with_tail = with_tail && !e.tail.empty();
        for (auto& t : tiers) {
            if (with_tail) t->put(tail_entry_name(p.header.key), e.tail);
            t->put(main_entry_name(p.header.key), e.main);
        }
        std::lock_guard<std::mutex> lk(mu);
        ++st.blocks_stored;
        st.bytes_stored += e.main.size() + (with_tail ? e.tail.size() : 0);
    }

    /// A block whose tail was split off: write what the store lacks of it.
    void write_split(const Recorder::Chain& c, const Recorder::Chain::Pending& p) {
        const int j = int(p.header.index);
        const bool wanted = j == c.want_tail;
        if (j < c.stored_mains && !wanted) return;  // the store has it
        write(p, wanted || (j + 1) % c.tail_every == 0);
    }

    /// Block `index`'s state reached the write thread.
    void diff_and_write(Recorder::Chain& c, int index, const std::vector<std::uint8_t>& state) {
        Recorder::Chain::Pending next;
        next.delta = diff_states(c.prev, state);
        BlockHeader& h = next.header;
        h.model_fingerprint = opt.ns.model_fingerprint;
        h.key = c.keys[std::size_t(index)];
        h.parent = index == 0 ? ns_key : c.keys[std::size_t(index) - 1];
        h.index = std::uint32_t(index);
        h.block_tokens = std::uint32_t(block());
        h.state_checksum = xxh64(state.data(), state.size());
        if (c.pending) {
            split_lasting(c.pending->delta, next.delta);
            write_split(c, *c.pending);
        }
        c.pending = std::move(next);
        c.prev = state;
    }
};

PrefixStore::PrefixStore(std::vector<std::unique_ptr<KvStore>> tiers, Options options) {
    AQPIM_CHECK(!tiers.empty(), "kv store: no tier");
    AQPIM_CHECK(options.ns.block_tokens > 0, "kv store: block of {} tokens", options.ns.block_tokens);
    AQPIM_CHECK(options.tail_every > 0, "kv store: a tail every {} blocks", options.tail_every);
    impl_ = std::make_unique<Impl>(std::move(tiers), std::move(options));
}
PrefixStore::~PrefixStore() = default;  // the queues finish their jobs before the tiers go

int PrefixStore::block_tokens() const { return impl_->block(); }
const StoreNamespace& PrefixStore::ns() const { return impl_->opt.ns; }

PrefixHit PrefixStore::lookup(std::span<const std::int32_t> prompt) { return impl_->lookup(prompt); }

void PrefixStore::lookup_async(std::vector<std::int32_t> prompt, std::function<void(PrefixHit)> done) {
    Impl* impl = impl_.get();
    impl->fetches.push([impl, prompt = std::move(prompt), done = std::move(done)] {
        PrefixHit hit;
        try {
            hit = impl->lookup(prompt);
        } catch (const std::exception& e) {  // out of memory composing, a bug: the request prefills
            if (impl->opt.warn) impl->opt.warn(fmt::format("kv store: lookup failed: {}", e.what()));
        }
        done(std::move(hit));
    });
}

std::unique_ptr<PrefixStore::Recorder> PrefixStore::recorder(std::span<const std::int32_t> prompt, PrefixHit found) {
    auto c = std::make_shared<Recorder::Chain>();
    c->keys = impl_->keys(prompt, prompt.size() / std::size_t(impl_->block()));
    c->tail_every = impl_->opt.tail_every;
    c->next = found.blocks;
    c->prev = std::move(found.state);
    c->stored_mains = found.mains_found;
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
                impl.diff_and_write(*c, index, *held);
            } catch (const std::exception& e) {
                if (impl.opt.warn) impl.opt.warn(fmt::format("kv store: block {} not written: {}", index, e.what()));
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
            if (impl.opt.warn) impl.opt.warn(fmt::format("kv store: a block not written: {}", e.what()));
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

std::vector<std::uint64_t> PrefixStore::reported_bytes(std::span<const std::int32_t> prompt) {
    const std::vector<BlockKey> k = impl_->keys(prompt, prompt.size() / std::size_t(impl_->block()));
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
