#pragma once
// The tiers of the KV prefix store (docs/kv-store.md): byte stores keyed by strings behind one small
// interface. `memory` keeps values in this process (least recently used first out, under a byte
// budget); `disk` keeps them as files in a local directory (written atomically, under a size cap);
// `redis` keeps them in a Redis server that several `aqpim serve` replicas share. Values carry their
// own checksums (the prefix store's entries), so a tier only moves bytes.
//
// A backend never throws on a lookup or a store: one that fails or cannot be reached answers
// "absent" (get) or false (put), counts an error, and reports one warning line through `warn`
// (rate-limited); an unreachable Redis is retried at most once a second.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace aqpim {

struct KvStoreStats {
    std::string tier;                       ///< "memory", "disk" or "redis"
    std::string where;                      ///< the spec it was made from
    std::uint64_t entries = 0, bytes = 0;   ///< what it holds (redis: what this process stored there)
    std::uint64_t capacity_bytes = 0;       ///< its byte budget (0: the backend's own policy)
    std::uint64_t hits = 0, misses = 0;     ///< values found / not found by get()
    std::uint64_t bytes_read = 0, bytes_written = 0;
    std::uint64_t puts = 0, evictions = 0;  ///< values stored; values dropped for room
    std::uint64_t errors = 0;               ///< failed operations (unreachable, I/O, refused)
    bool available = true;                  ///< the last operation reached the backend
};

using Bytes = std::vector<std::uint8_t>;
/// One warning line from a store (a dead Redis, a failed write); may be called from any thread.
using WarnFn = std::function<void(const std::string&)>;

class KvStore {
public:
    virtual ~KvStore() = default;
    /// The values of `keys`, in order (nullopt: absent or unreachable); one round trip where the
    /// backend allows it.
    virtual std::vector<std::optional<Bytes>> get(std::span<const std::string> keys) = 0;
    /// Store a value (replacing any); false when the backend refused it or cannot be reached.
    virtual bool put(const std::string& key, std::span<const std::uint8_t> value) = 0;
    /// Drop a value if present (a corrupt entry found by a reader).
    virtual void remove(const std::string& key) = 0;
    /// Bytes the backend itself accounts for `key`: Redis's MEMORY USAGE, the file's allocated
    /// blocks, the value and its bookkeeping in memory; nullopt when absent or unreachable.
    virtual std::optional<std::uint64_t> reported_bytes(const std::string& key) = 0;
    virtual KvStoreStats stats() const = 0;

    std::optional<Bytes> get_one(const std::string& key) { return std::move(get({&key, 1})[0]); }
};

/// A tier from its spec (aqpim::Error naming a bad one):
///   memory[:BYTES]            this process, LRU under BYTES (default 1GiB)
///   disk:DIR[:BYTES]          files in DIR (created if missing), oldest-used out over BYTES (default 10GiB)
///   redis://HOST[:PORT][/DB]  a Redis server (PORT 6379, DB 0); eviction is Redis's own policy
std::unique_ptr<KvStore> make_kv_store(const std::string& spec, WarnFn warn = {});

}  // namespace aqpim
