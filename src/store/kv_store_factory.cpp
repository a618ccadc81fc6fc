// make_kv_store: a tier from its spec (aqpim/kv_store.h).

#include <fmt/format.h>

#include <charconv>

#include "aqpim/byte_size.h"
#include "aqpim/error.h"
#include "store/tiers.h"

namespace aqpim {

namespace {

constexpr std::uint64_t kDefaultMemoryBytes = std::uint64_t(1) << 30;
constexpr std::uint64_t kDefaultDiskBytes = std::uint64_t(10) << 30;

int parse_int_in(std::string_view text, int lo, int hi, const std::string& spec, const char* what) {
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    AQPIM_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= lo && v <= hi,
                "--kv-store {}: {} '{}' is not an integer in [{}, {}]", spec, what, text, lo, hi);
    return v;
}

std::unique_ptr<KvStore> make_redis(const std::string& spec, WarnFn warn) {
    std::string_view rest = std::string_view(spec).substr(std::string_view("redis://").size());
    int db = 0, port = 6379;
    if (const std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
        db = parse_int_in(rest.substr(slash + 1), 0, 1 << 20, spec, "database");
        rest = rest.substr(0, slash);
    }
    if (const std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
        port = parse_int_in(rest.substr(colon + 1), 1, 65535, spec, "port");
        rest = rest.substr(0, colon);
    }
    AQPIM_CHECK(!rest.empty(), "--kv-store {}: no host (redis://HOST[:PORT][/DB])", spec);
    return store::make_redis_store(spec, std::string(rest), port, db, std::move(warn));
}

}  // namespace

namespace store {

std::optional<DiskSpec> parse_disk_spec(const std::string& spec) {
    if (!spec.starts_with("disk:")) return std::nullopt;
    DiskSpec d{spec.substr(5), kDefaultDiskBytes};
    if (const std::size_t colon = d.dir.rfind(':'); colon != std::string::npos) {
        try {
            d.capacity_bytes = parse_byte_size(d.dir.substr(colon + 1), "--kv-store disk:");
            d.dir = d.dir.substr(0, colon);
        } catch (const Error&) {
        }
    }
    AQPIM_CHECK(!d.dir.empty(), "--kv-store {}: no directory (disk:DIR[:BYTES])", spec);
    return d;
}

}  // namespace store

std::unique_ptr<KvStore> make_kv_store(const std::string& spec, WarnFn warn) {
    if (spec.starts_with("redis://")) return make_redis(spec, std::move(warn));
    if (spec == "memory") return store::make_memory_store(spec, kDefaultMemoryBytes);
    if (spec.starts_with("memory:"))
        return store::make_memory_store(spec, parse_byte_size(spec.substr(7), "--kv-store memory:"));
    if (const std::optional<store::DiskSpec> d = store::parse_disk_spec(spec))
        return store::make_disk_store(spec, d->dir, d->capacity_bytes, std::move(warn));
    AQPIM_FAIL("--kv-store {}: not a store (memory[:BYTES], disk:DIR[:BYTES], redis://HOST[:PORT][/DB])", spec);
}

}  // namespace aqpim
