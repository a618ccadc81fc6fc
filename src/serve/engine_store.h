#pragma once
// What the serving engine keeps outside its KV budget (docs/kv-store.md, "In the server"): the
// prefix store (a prompt that begins with stored blocks restores them instead of prefilling them;
// the blocks a prefill computes are recorded) and the disk tier for parked sequences (an idle
// conversation's KV goes to disk when the budget needs its room, and comes back with its next
// request). Methods run on the scheduler thread unless stated.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_state.h"
#include "serve/engine.h"
#include "store/prefix_store.h"

namespace aqpim::serve {

class EngineStore {
public:
    /// `wake` is called (from the fetch thread) when a lookup has finished.
    EngineStore(const EngineOptions& opt, const KvCache& cache, const ModelIdentity& model, std::function<void()> wake);
    ~EngineStore();

    // ---- prefixes ---------------------------------------------------------------------------------
    /// Whether a prompt is long enough for a stored block to save prefill (at least one whole block
    /// and one more token).
    bool worth_lookup(std::span<const std::int32_t> prompt) const;
    /// Look up the request's prompt (in the space of its salt) on the fetch thread; take_fetched()
    /// has the result after wake().
    void start_lookup(int slot, std::uint64_t request_id, std::vector<std::int32_t> prompt, const std::string& salt);
    struct Fetched {
        int slot = 0;
        std::uint64_t request_id = 0;
        store::PrefixHit found;
    };
    /// Lookups finished since the last call (any thread).
    std::vector<Fetched> take_fetched();
    bool has_fetched() const;

    /// Restore a hit into free sequence `id` of the cache: true when it is restored and holds the
    /// prompt's first hit.n_tokens tokens; false (counted as foreign, the cache as it was) otherwise.
    bool restore(KvCache& cache, int id, const store::PrefixHit& hit, std::span<const std::int32_t> prompt);
    /// A recorder of the blocks of `prompt` past those `found` restored (null without a prefix store).
    std::unique_ptr<store::PrefixStore::Recorder> recorder(std::span<const std::int32_t> prompt, const std::string& salt,
                                                           store::PrefixHit found = {});
    /// After a prefill chunk: when sequence `id` holds exactly the end of the recorder's next block,
    /// its state goes to the recorder.
    void record(store::PrefixStore::Recorder& r, const KvCache& cache, int id, std::span<const std::int32_t> tokens,
                std::int64_t n_cached);

    // ---- parked sequences on disk -------------------------------------------------------------------
    /// Whether parked sequences can go to disk (a disk tier is configured).
    bool can_spill() const;
    /// Save sequence `id` (with its slot) to the disk tier; its key, or nullopt when the write failed
    /// (the disk is full: the sequence stays in memory). The caller then removes it from the cache.
    std::optional<std::string> spill(const KvCache& cache, int id, const SlotState& slot);
    /// The spilled state's bytes (they stay on disk until drop()); aqpim::Error when unreadable.
    /// `coming_back`: read to restore it into the cache (counted in `unspills`), not to copy it.
    std::vector<std::uint8_t> spilled_state(const std::string& key, bool coming_back);
    void drop(const std::string& key);

    // ---- the prompt cache's sequences on disk -------------------------------------------------------
    /// Write a cached sequence that admission drops (`slot`: its tokens, n_cached of them fed) to the
    /// disk tier, for requests of `salt`; false when not written (a full disk, or no room beside
    /// `keep`). The least recently written but `keep` (the one the request being admitted continues)
    /// go while these hold more than the disk tier's BYTES.
    bool cache_on_disk(const KvCache& cache, int id, const SlotState& slot, const std::string& salt,
                       const std::string& keep);
    struct DiskCachedHit {
        std::string key;
        std::int64_t n_tokens = 0;
    };
    /// The longest sequence on disk whose fed tokens begin `prompt`, with tokens of `prompt` left
    /// over, written for `salt`; nullopt: none.
    std::optional<DiskCachedHit> disk_cached_match(std::span<const std::int32_t> prompt, const std::string& salt) const;
    /// Restore a matched sequence into free sequence `id` of the cache and forget it on disk: true when
    /// it is restored and holds the prompt's first hit.n_tokens tokens; false (counted as refused, the
    /// cache as it was) otherwise.
    bool restore_disk_cached(KvCache& cache, int id, const DiskCachedHit& hit, std::span<const std::int32_t> prompt);
    /// Counters and sizes of the sequences on disk (the disk_* fields; the rest left 0).
    PromptCacheStats disk_cached_stats() const;

    StoreStats stats() const;

    /// Finish queued writes (tests, benchmarks).
    void flush();
    /// PrefixStore::reported_bytes (empty without a prefix store). Any thread.
    std::vector<std::uint64_t> reported_bytes(std::span<const std::int32_t> prompt);

private:
    const EngineOptions& opt_;
    const ModelIdentity& model_;
    std::function<void()> wake_;
    mutable std::mutex mu_;            // fetched_, stats_
    std::vector<Fetched> fetched_;
    std::atomic<bool> any_fetched_{false};  ///< fetched_ is not empty (read without mu_ by the scheduler's wait)
    StoreStats stats_;
    std::uint64_t next_spill_ = 0;
    std::unique_ptr<KvStore> parked_;  ///< the disk tier's directory for parked sequences (none: no spilling)
    std::string parked_dir_;
    struct DiskCached {
        std::string key;
        std::vector<std::int32_t> tokens;  ///< the fed tokens
        std::string salt;
        std::uint64_t bytes = 0;
    };
    std::unique_ptr<KvStore> cached_;          ///< the prompt cache's sequences on disk (beside parked_)
    std::vector<DiskCached> disk_cached_;      ///< oldest first (scheduler thread)
    std::uint64_t disk_cached_capacity_ = 0;   ///< the disk tier's BYTES
    PromptCacheStats disk_cached_stats_;       ///< under mu_
    /// restore_kv_state of a prefix of `prompt` (`what` names it in warnings): as restore().
    bool restore_state(KvCache& cache, int id, std::span<const std::uint8_t> state, std::int64_t n_tokens,
                       std::span<const std::int32_t> prompt, const char* what);
    /// Last: destroyed first, its fetch thread gone before what its callbacks touch.
    std::unique_ptr<store::PrefixStore> prefix_;
};

}  // namespace aqpim::serve
