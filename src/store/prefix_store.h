#pragma once
// The KV prefix store (docs/kv-store.md): prompts cut into blocks of `block_tokens` tokens; the KV
// state at each block's end is stored as a delta against the state at its start (state_delta.h),
// content-addressed by a hash of the model, the scheme, the context, the prefill's chunking and
// every token up to the block's end (block_entry.h), in every tier (write-through). A prompt that
// begins with stored blocks restores the longest such chain instead of prefilling it: the same
// state, bit for bit, that prefilling those tokens computes.
//
// Threads: lookups run on the store's fetch thread and end in a callback; block states are
// diffed, encoded and written on its write thread, in each recorder's order, with a bounded queue
// (over it, a recording is dropped and counted, never the request). Every entry read is checked
// (checksum, model, key, parent, sizes) before it is used; a bad one is counted, removed from the
// tier that held it, and the chain ends before it.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "aqpim/kv_store.h"
#include "store/block_entry.h"

namespace aqpim::store {

/// Tokens per block, and blocks per stored tail, unless the user says otherwise.
inline constexpr int kDefaultBlockTokens = 256;
inline constexpr int kDefaultTailEvery = 8;

struct PrefixStoreStats {
    std::uint64_t lookups = 0;           ///< prompts looked up
    std::uint64_t lookup_hits = 0;       ///< ... that found at least one block
    std::uint64_t blocks_restored = 0;   ///< blocks of the chains found
    std::uint64_t tokens_restored = 0;   ///< prompt tokens not prefilled thanks to them
    std::uint64_t bytes_fetched = 0;     ///< entry bytes read to restore them
    std::uint64_t blocks_stored = 0;     ///< blocks written (to every tier)
    std::uint64_t bytes_stored = 0;      ///< their entry bytes (main + tail), once per block
    std::uint64_t rejected_corrupt = 0;  ///< entries with a bad checksum, magic, version, size or op
    std::uint64_t rejected_foreign = 0;  ///< entries of another model, chain, scheme or state
    std::uint64_t inconsistent = 0;      ///< blocks written against another split of their parent (racing writers)
    std::uint64_t recordings_dropped = 0;  ///< block states not written: the write queue was full
    std::vector<KvStoreStats> tiers;     ///< each tier's own counters, in lookup order
};

/// A stored block's split, as a recorder needs it: the next block is written without copying its
/// tail ranges, and a missing tail can be cut from the state a prefill computed.
struct StoredSplit {
    std::vector<DeltaOp> ops;
    std::uint64_t lasting_bytes = 0, tail_bytes = 0, tail_checksum = 0;
};

/// What a lookup found for a prompt: the chain of blocks it restores (possibly none) and how far
/// the stored main entries went (a chain ends where a block's tail is missing: the request that then
/// prefills past that block writes its tail, so the next prompt that stops there restores it).
struct PrefixHit {
    int blocks = 0;                   ///< whole blocks restored (0: none)
    std::int64_t n_tokens = 0;        ///< blocks x block_tokens
    std::vector<std::uint8_t> state;  ///< the KV state (save_kv_state bytes) after them; empty without blocks
    int mains_found = 0;              ///< leading main entries that are valid and consistent (>= blocks)
    /// The splits of blocks [max(blocks - 1, 0), mains_found), in order: those a recorder writes after.
    std::vector<StoredSplit> splits;
};

class PrefixStore {
public:
    struct Options {
        StoreNamespace ns;
        std::uint64_t max_state_bytes = 0;              ///< largest state a chain may compose to
        std::uint64_t write_queue_bytes = 256ULL << 20;  ///< states waiting to be written, at most
        /// Tails are written for every tail_every-th block (and for the last block of a prompt, and
        /// lazily where a chain was found to end): a tail is the state's short-lived bytes (a PQ
        /// sequence's f16 window) and costs as much as many blocks' codes.
        int tail_every = kDefaultTailEvery;
        WarnFn warn;
    };
    /// tiers: searched in order; a block found in a later tier is copied into the earlier ones.
    PrefixStore(std::vector<std::unique_ptr<KvStore>> tiers, Options options);
    ~PrefixStore();  ///< finishes the queued writes, drops the lookups not started, joins the threads
    PrefixStore(const PrefixStore&) = delete;
    PrefixStore& operator=(const PrefixStore&) = delete;

    int block_tokens() const;
    const StoreNamespace& ns() const;

    /// The longest chain of stored blocks `prompt` begins with that leaves at least one token to
    /// feed and whose last block's tail is stored, in the space of `salt` (blocks stored under
    /// another salt are other keys; empty: the unsalted space). Blocking: tier round trips.
    PrefixHit lookup(std::span<const std::int32_t> prompt, const std::string& salt = {});
    /// lookup() on the fetch thread; `done` runs there with the result.
    void lookup_async(std::vector<std::int32_t> prompt, std::string salt, std::function<void(PrefixHit)> done);

    /// Records the blocks of one sequence's prefill (the prompt's whole blocks past those restored).
    class Recorder {
    public:
        /// Whether the sequence holding n tokens is at the end of the next block to record.
        bool wants(std::int64_t n_tokens) const;
        /// The state (save_kv_state bytes, n_cached = the block's end) at the end of that block.
        void record(std::vector<std::uint8_t> state);
        /// No more blocks: the last one recorded is written with its tail in its main entry.
        void finish();
        ~Recorder();

    private:
        friend class PrefixStore;
        struct Chain;
        Recorder(PrefixStore& store, std::shared_ptr<Chain> chain);
        PrefixStore& store_;
        std::shared_ptr<Chain> chain_;
        bool finished_ = false;
    };
    /// A recorder for `prompt` after `found` (a lookup's result, its state restored into the
    /// sequence; default: nothing found): blocks found are not written again (except a missing
    /// tail), and the next block is written against the restored state.
    std::unique_ptr<Recorder> recorder(std::span<const std::int32_t> prompt, const std::string& salt = {},
                                       PrefixHit found = {});

    PrefixStoreStats stats() const;
    /// Wait until every queued write and lookup is done (tests and benchmarks).
    void flush();

    /// Bytes each tier reports for the entries of `prompt`'s whole blocks (main and tail), summed:
    /// `bench serve --kv-store` (Redis's MEMORY USAGE). Absent entries count 0.
    std::vector<std::uint64_t> reported_bytes(std::span<const std::int32_t> prompt, const std::string& salt = {});

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace aqpim::store
