// The memory tier: values in this process, least recently used out under a byte budget.

#include "store/tiers.h"

#include <mutex>
#include <unordered_map>

#include "store/lru_index.h"

namespace aqpim::store {

namespace {

/// Bookkeeping a value costs beside its bytes (its key, the map and list nodes), counted in the budget.
std::uint64_t entry_bytes(const std::string& key, std::size_t value_bytes) { return value_bytes + key.size() + 96; }

class MemoryStore final : public KvStore {
public:
    MemoryStore(std::string where, std::uint64_t capacity) {
        stats_.tier = "memory";
        stats_.where = std::move(where);
        stats_.capacity_bytes = capacity;
    }

    std::vector<std::optional<Bytes>> get(std::span<const std::string> keys) override {
        std::lock_guard<std::mutex> lk(mu_);
        std::vector<std::optional<Bytes>> out;
        for (const std::string& k : keys) {
            const auto it = values_.find(k);
            if (it == values_.end()) {
                ++stats_.misses;
                out.emplace_back();
                continue;
            }
            lru_.touch(k);
            ++stats_.hits;
            stats_.bytes_read += it->second.size();
            out.emplace_back(it->second);
        }
        return out;
    }

    bool put(const std::string& key, std::span<const std::uint8_t> value) override {
        std::lock_guard<std::mutex> lk(mu_);
        const std::uint64_t need = entry_bytes(key, value.size());
        if (need > stats_.capacity_bytes) {
            ++stats_.errors;  // larger than the whole tier: refused, nothing evicted for it
            return false;
        }
        erase_locked(key);
        while (lru_.total_bytes() + need > stats_.capacity_bytes) {
            erase_locked(*lru_.oldest());
            ++stats_.evictions;
        }
        values_[key] = Bytes(value.begin(), value.end());
        lru_.put(key, need);
        ++stats_.puts;
        stats_.bytes_written += value.size();
        return true;
    }

    void remove(const std::string& key) override {
        std::lock_guard<std::mutex> lk(mu_);
        erase_locked(key);
    }

    std::optional<std::uint64_t> reported_bytes(const std::string& key) override {
        std::lock_guard<std::mutex> lk(mu_);
        return lru_.bytes_of(key);
    }

    KvStoreStats stats() const override {
        std::lock_guard<std::mutex> lk(mu_);
        return lru_.counted(stats_);
    }

private:
    void erase_locked(const std::string& key) {
        values_.erase(key);
        lru_.erase(key);
    }

    mutable std::mutex mu_;
    std::unordered_map<std::string, Bytes> values_;
    LruIndex lru_;
    KvStoreStats stats_;
};

}  // namespace

std::unique_ptr<KvStore> make_memory_store(std::string where, std::uint64_t capacity_bytes) {
    return std::make_unique<MemoryStore>(std::move(where), capacity_bytes);
}

}  // namespace aqpim::store
