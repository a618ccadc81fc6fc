// The disk tier: one file per value in a local directory, written through OutputFile (a temporary
// file renamed into place: a reader sees a whole value or none), least recently used out over a
// size cap. Files are read and written outside the index's lock; a file another process wrote
// into the same directory is found (and adopted into the index) when asked for.

#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "store/lru_index.h"
#include "store/tiers.h"
#include "store/warn_limiter.h"

namespace aqpim::store {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSuffix = ".aqkv";

/// Keys become file names: letters, digits, '.', '_', '-', not starting with '.', at most 200 bytes.
bool safe_key(const std::string& key) {
    if (key.empty() || key.size() > 200 || key[0] == '.') return false;
    return std::all_of(key.begin(), key.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    });
}

class DiskStore final : public KvStore {
public:
    DiskStore(std::string where, const std::string& dir, std::uint64_t capacity, WarnFn warn)
        : dir_(dir), warn_(std::move(warn)) {
        stats_.tier = "disk";
        stats_.where = std::move(where);
        stats_.capacity_bytes = capacity;
        std::error_code ec;
        fs::create_directories(dir_, ec);
        AQPIM_CHECK(fs::is_directory(dir_), "kv store {}: {} is not a directory{}", stats_.where, dir_,
                    ec ? ": " + ec.message() : "");
        // Values an earlier run left, oldest first (each put() makes its key the most recent).
        std::vector<std::pair<fs::file_time_type, fs::path>> found;
        for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
            const std::string name = e.path().filename().string();
            if (!e.is_regular_file()) continue;
            if (name.ends_with(kSuffix))
                found.emplace_back(e.last_write_time(ec), e.path());
            else if (name.find(std::string(kSuffix) + ".") != std::string::npos &&
                     e.last_write_time(ec) < fs::file_time_type::clock::now() - std::chrono::minutes(10))
                fs::remove(e.path(), ec);  // a temporary file of a write that never completed (not one in progress)
        }
        std::sort(found.begin(), found.end());
        for (const auto& [when, path] : found) {
            const std::string name = path.filename().string();
            lru_.put(name.substr(0, name.size() - std::char_traits<char>::length(kSuffix)), fs::file_size(path, ec));
        }
        evict_locked(0);
    }

    std::vector<std::optional<Bytes>> get(std::span<const std::string> keys) override {
        std::vector<std::optional<Bytes>> out;
        for (const std::string& k : keys) {
            out.emplace_back();
            std::error_code ec;
            if (!safe_key(k) || !fs::is_regular_file(path_of(k), ec)) {  // gone: evicted, or never here
                std::lock_guard<std::mutex> lk(mu_);
                lru_.erase(k);
                ++stats_.misses;
                continue;
            }
            try {
                const std::string bytes = read_whole_file(path_of(k), "kv store file", stats_.capacity_bytes);
                out.back() = Bytes(bytes.begin(), bytes.end());
                std::lock_guard<std::mutex> lk(mu_);
                if (!lru_.touch(k)) lru_.put(k, bytes.size());  // another process wrote it
                ++stats_.hits;
                stats_.bytes_read += bytes.size();
            } catch (const Error& e) {  // unreadable, or removed since
                std::lock_guard<std::mutex> lk(mu_);
                lru_.erase(k);
                ++stats_.misses;
                ++stats_.errors;
                warn_(fmt::format("kv store {}: {}", stats_.where, e.what()));
            }
        }
        return out;
    }

    bool put(const std::string& key, std::span<const std::uint8_t> value) override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (!safe_key(key) || value.size() > stats_.capacity_bytes) {
                ++stats_.errors;
                return false;
            }
            lru_.erase(key);
            evict_locked(value.size());
        }
        try {
            OutputFile f(path_of(key), "kv store file");
            f.stream().write(reinterpret_cast<const char*>(value.data()), std::streamsize(value.size()));
            f.commit();
        } catch (const Error& e) {
            std::lock_guard<std::mutex> lk(mu_);
            ++stats_.errors;
            warn_(fmt::format("kv store {}: {}", stats_.where, e.what()));
            return false;
        }
        std::lock_guard<std::mutex> lk(mu_);
        lru_.put(key, value.size());
        ++stats_.puts;
        stats_.bytes_written += value.size();
        return true;
    }

    void remove(const std::string& key) override {
        std::lock_guard<std::mutex> lk(mu_);
        if (!safe_key(key)) return;
        lru_.erase(key);
        std::error_code ec;
        fs::remove(path_of(key), ec);
    }

    std::optional<std::uint64_t> reported_bytes(const std::string& key) override {
        struct stat st {};
        if (!safe_key(key) || ::stat(path_of(key).c_str(), &st) != 0) return std::nullopt;
        return std::uint64_t(st.st_blocks) * 512;
    }

    KvStoreStats stats() const override {
        std::lock_guard<std::mutex> lk(mu_);
        return lru_.counted(stats_);
    }

private:
    std::string path_of(const std::string& key) const { return (fs::path(dir_) / (key + kSuffix)).string(); }

    /// Remove the oldest files until `incoming` more bytes fit under the cap.
    void evict_locked(std::uint64_t incoming) {
        std::error_code ec;
        while (lru_.size() > 0 && lru_.total_bytes() + incoming > stats_.capacity_bytes) {
            const std::string k = *lru_.oldest();
            lru_.erase(k);
            fs::remove(path_of(k), ec);
            ++stats_.evictions;
        }
    }

    std::string dir_;
    WarnLimiter warn_;
    mutable std::mutex mu_;
    LruIndex lru_;
    KvStoreStats stats_;
};

}  // namespace

std::unique_ptr<KvStore> make_disk_store(std::string where, const std::string& dir, std::uint64_t capacity_bytes,
                                         WarnFn warn) {
    return std::make_unique<DiskStore>(std::move(where), dir, capacity_bytes, std::move(warn));
}

}  // namespace aqpim::store
