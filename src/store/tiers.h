#pragma once
// The tier backends behind make_kv_store (aqpim/kv_store.h), one file each.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "aqpim/kv_store.h"

namespace aqpim::store {

/// A `disk:DIR[:BYTES]` spec read: DIR, and BYTES when what follows the last ':' reads as a size
/// (otherwise it is all DIR). Not a disk spec: nullopt.
struct DiskSpec {
    std::string dir;
    std::uint64_t capacity_bytes = 0;
};
std::optional<DiskSpec> parse_disk_spec(const std::string& spec);

std::unique_ptr<KvStore> make_memory_store(std::string where, std::uint64_t capacity_bytes);
/// Files "<key>.aqkv" in `dir` (created if missing; files there from an earlier run are kept and
/// counted, oldest modification first out).
std::unique_ptr<KvStore> make_disk_store(std::string where, const std::string& dir, std::uint64_t capacity_bytes,
                                         WarnFn warn);
std::unique_ptr<KvStore> make_redis_store(std::string where, const std::string& host, int port, int db, WarnFn warn);

}  // namespace aqpim::store
