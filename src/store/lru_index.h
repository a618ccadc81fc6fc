#pragma once
// Keys with sizes in least-recently-used order: the eviction order of the memory and disk tiers.
// Not thread-safe (each tier holds it under its own mutex).

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "aqpim/kv_store.h"

namespace aqpim::store {

class LruIndex {
public:
    /// Insert or replace `key` as the most recent.
    void put(const std::string& key, std::uint64_t bytes) {
        erase(key);
        order_.push_front(key);
        map_[key] = {order_.begin(), bytes};
        total_ += bytes;
    }
    /// Make `key` the most recent; false if absent.
    bool touch(const std::string& key) {
        const auto it = map_.find(key);
        if (it == map_.end()) return false;
        order_.splice(order_.begin(), order_, it->second.pos);
        return true;
    }
    void erase(const std::string& key) {
        const auto it = map_.find(key);
        if (it == map_.end()) return;
        total_ -= it->second.bytes;
        order_.erase(it->second.pos);
        map_.erase(it);
    }
    /// The least recently used key (nullopt when empty).
    std::optional<std::string> oldest() const {
        if (order_.empty()) return std::nullopt;
        return order_.back();
    }
    std::optional<std::uint64_t> bytes_of(const std::string& key) const {
        const auto it = map_.find(key);
        if (it == map_.end()) return std::nullopt;
        return it->second.bytes;
    }
    std::uint64_t total_bytes() const { return total_; }
    std::size_t size() const { return map_.size(); }
    /// A tier's stats with what this index holds as its entries and bytes.
    KvStoreStats counted(KvStoreStats s) const {
        s.entries = size();
        s.bytes = total_;
        return s;
    }

private:
    struct Entry {
        std::list<std::string>::iterator pos;
        std::uint64_t bytes = 0;
    };
    std::list<std::string> order_;  ///< most recent first
    std::unordered_map<std::string, Entry> map_;
    std::uint64_t total_ = 0;
};

}  // namespace aqpim::store
