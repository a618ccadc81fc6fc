// The serving engine's prefix store and disk tier for parked sequences (docs/kv-store.md).

#include "serve/engine_store.h"

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>

#include <fmt/format.h>

#include <filesystem>
#include <random>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/build_id.h"
#include "aqpim/simd.h"
#include "aqpim/weights.h"
#include "store/tiers.h"

namespace aqpim::serve {

namespace {

/// Room left beside a spilled state: a spill never fills the disk.
constexpr std::uint64_t kSpillFreeMargin = std::uint64_t(256) << 20;

/// This machine's name as a directory name may hold it (letters, digits, '.', '_'; others '_').
std::string host_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "host";
    std::string h(buf);
    for (char& c : h)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_') c = '_';
    return h;
}

/// Remove the parked-sequence directories of this machine's servers that are gone (a crash leaves
/// them): `parked-HOST-PID-NONCE`. A DIR shared with other machines keeps theirs (their PIDs mean
/// nothing here).
void sweep_parked_dirs(const std::string& dir, const std::string& host) {
    std::error_code ec;
    const std::string prefix = "parked-" + host + "-";
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        int pid = 0;
        if (!e.is_directory() || name.rfind(prefix, 0) != 0 || std::sscanf(name.c_str() + prefix.size(), "%d-", &pid) != 1 ||
            pid <= 0)
            continue;
        if (::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove_all(e.path(), ec);
    }
}

}  // namespace

EngineStore::EngineStore(const EngineOptions& opt, const KvCache& cache, const ModelIdentity& model,
                         std::function<void()> wake)
    : opt_(opt), model_(model), wake_(std::move(wake)) {
    if (opt.kv_store.empty()) return;
    std::vector<std::unique_ptr<KvStore>> tiers;
    std::optional<store::DiskSpec> disk;
    for (const std::string& spec : opt.kv_store) {
        tiers.push_back(make_kv_store(spec, opt.warn));
        if (!disk) disk = store::parse_disk_spec(spec);
    }
    store::PrefixStore::Options o;
    o.ns = {model.fingerprint, cache.scheme(), opt.ctx, opt.kv_store_block, opt.prefill_chunk,
            fmt::format("aqpim {} {}, {}", AQPIM_BUILD_ID, simd_level_name(active_simd_level()), gemm_backend())};
    o.max_state_bytes = opt.kv_budget_bytes + 4 * std::uint64_t(opt.ctx) + (std::uint64_t(1) << 20);
    o.tail_every = opt.kv_store_tail_every;
    o.warn = opt.warn;
    prefix_ = std::make_unique<store::PrefixStore>(std::move(tiers), std::move(o));
    if (disk) {
        // Parked sequences are this process's own: a directory of its own, removed at the end.
        const std::string host = host_name();
        sweep_parked_dirs(disk->dir, host);
        std::random_device rd;
        parked_dir_ = (std::filesystem::path(disk->dir) / fmt::format("parked-{}-{}-{:08x}", host, ::getpid(), rd())).string();
        parked_ = store::make_disk_store("disk:" + parked_dir_, parked_dir_, ~std::uint64_t(0), opt.warn);
        if (opt.cache_prompt) {
            const std::string dir = parked_dir_ + "/cached";
            cached_ = store::make_disk_store("disk:" + dir, dir, ~std::uint64_t(0), opt.warn);
            disk_cached_capacity_ = disk->capacity_bytes;
        }
    }
}

EngineStore::~EngineStore() {
    prefix_.reset();  // queued lookups dropped, the one running finished: no callback comes after this
    cached_.reset();
    parked_.reset();
    if (!parked_dir_.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(parked_dir_, ec);
    }
}

bool EngineStore::worth_lookup(std::span<const std::int32_t> prompt) const {
    return prefix_ && std::int64_t(prompt.size()) > prefix_->block_tokens();
}

void EngineStore::start_lookup(int slot, std::uint64_t request_id, std::vector<std::int32_t> prompt,
                               const std::string& salt) {
    prefix_->lookup_async(std::move(prompt), salt, [this, slot, request_id](store::PrefixHit found) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            fetched_.push_back({slot, request_id, std::move(found)});
            any_fetched_.store(true);
        }
        wake_();
    });
}

std::vector<EngineStore::Fetched> EngineStore::take_fetched() {
    std::lock_guard<std::mutex> lk(mu_);
    any_fetched_.store(false);
    return std::exchange(fetched_, {});
}

bool EngineStore::has_fetched() const { return any_fetched_.load(); }

bool EngineStore::restore(KvCache& cache, int id, const store::PrefixHit& hit, std::span<const std::int32_t> prompt) {
    return restore_state(cache, id, hit.state, hit.n_tokens, prompt, "a restored prefix");
}

bool EngineStore::restore_state(KvCache& cache, int id, std::span<const std::uint8_t> state, std::int64_t n_tokens,
                                std::span<const std::int32_t> prompt, const char* what) {
    try {
        const SlotState s = restore_kv_state(state, cache, id, model_);
        const bool same = s.n_cached == n_tokens && std::int64_t(s.tokens.size()) == n_tokens &&
                          std::equal(s.tokens.begin(), s.tokens.end(), prompt.begin());
        if (same) return true;
        cache.remove_sequence(id);
        if (opt_.warn) opt_.warn(fmt::format("kv store: {} holds other tokens than the prompt's (ignored)", what));
    } catch (const Error& e) {
        if (opt_.warn) opt_.warn(fmt::format("kv store: {} was refused: {}", what, e.what()));
    }
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.restore_refused;
    return false;
}

std::unique_ptr<store::PrefixStore::Recorder> EngineStore::recorder(std::span<const std::int32_t> prompt,
                                                                    const std::string& salt, store::PrefixHit found) {
    if (!prefix_) return nullptr;
    return prefix_->recorder(prompt, salt, std::move(found));
}

void EngineStore::record(store::PrefixStore::Recorder& r, const KvCache& cache, int id,
                         std::span<const std::int32_t> tokens, std::int64_t n_cached) {
    if (!r.wants(n_cached)) return;
    SlotState s;
    s.tokens.assign(tokens.begin(), tokens.begin() + n_cached);
    s.n_cached = n_cached;
    r.record(save_kv_state(cache, id, s, model_, opt_.ctx));
}

bool EngineStore::can_spill() const { return parked_ != nullptr; }

std::optional<std::string> EngineStore::spill(const KvCache& cache, int id, const SlotState& slot) {
    const std::vector<std::uint8_t> bytes = save_kv_state(cache, id, slot, model_, opt_.ctx);
    try {
        check_free_space(parked_dir_ + "/x", bytes.size() + kSpillFreeMargin, "kv store");
    } catch (const Error& e) {
        if (opt_.warn) opt_.warn(fmt::format("kv store: a parked sequence stays in memory: {}", e.what()));
        return std::nullopt;
    }
    const std::string key = fmt::format("seq{}", next_spill_++);
    if (!parked_->put(key, bytes)) return std::nullopt;
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.spills;
    return key;
}

std::vector<std::uint8_t> EngineStore::spilled_state(const std::string& key, bool coming_back) {
    std::optional<Bytes> b = parked_->get_one(key);
    AQPIM_CHECK(b.has_value(), "serve: the parked sequence {} cannot be read back from {}", key, parked_dir_);
    std::lock_guard<std::mutex> lk(mu_);
    stats_.unspills += coming_back ? 1 : 0;
    return std::move(*b);
}

void EngineStore::drop(const std::string& key) { parked_->remove(key); }

bool EngineStore::cache_on_disk(const KvCache& cache, int id, const SlotState& slot, const std::string& salt,
                                const std::string& keep) {
    if (!cached_) return false;
    const std::vector<std::uint8_t> bytes = save_kv_state(cache, id, slot, model_, opt_.ctx);
    std::uint64_t held = 0, kept = 0;
    for (const DiskCached& d : disk_cached_) (d.key == keep ? kept : held) += d.bytes;
    std::string why;
    if (kept + bytes.size() > disk_cached_capacity_) {
        why = fmt::format("{} bytes, beside {} kept for the request being admitted, exceed the tier's {}", bytes.size(), kept,
                          disk_cached_capacity_);
    } else {
        try {
            check_free_space(parked_dir_ + "/x", bytes.size() + kSpillFreeMargin, "kv store");
        } catch (const Error& e) {
            why = e.what();
        }
    }
    std::uint64_t evicted = 0;
    bool written = false;
    if (why.empty()) {
        for (auto it = disk_cached_.begin(); it != disk_cached_.end() && kept + held + bytes.size() > disk_cached_capacity_;) {
            if (it->key == keep) {
                ++it;
                continue;
            }
            held -= it->bytes;
            cached_->remove(it->key);
            it = disk_cached_.erase(it);
            ++evicted;
        }
        const std::string key = fmt::format("cached{}", next_spill_++);
        written = cached_->put(key, bytes);
        if (written)
            disk_cached_.push_back({key, {slot.tokens.begin(), slot.tokens.begin() + slot.n_cached}, salt, bytes.size()});
        else
            why = "the write failed";
    }
    std::uint64_t failures = 0;
    {
        std::lock_guard<std::mutex> lk(mu_);
        disk_cached_stats_.disk_evictions += evicted;
        disk_cached_stats_.disk_writes += written ? 1 : 0;
        failures = disk_cached_stats_.disk_write_failures += written ? 0 : 1;
        disk_cached_stats_.disk_sequences = disk_cached_.size();
        disk_cached_stats_.disk_bytes = kept + held + (written ? bytes.size() : 0);
    }
    if (!written && opt_.warn && (failures & (failures - 1)) == 0)  // the 1st, 2nd, 4th, 8th, ...: no flood
        opt_.warn(fmt::format("kv store: a cached sequence was dropped, not written to disk ({} so far): {}", failures, why));
    return written;
}

std::optional<EngineStore::DiskCachedHit> EngineStore::disk_cached_match(std::span<const std::int32_t> prompt,
                                                                        const std::string& salt) const {
    const DiskCached* best = nullptr;
    for (const DiskCached& d : disk_cached_) {
        const std::size_t n = d.tokens.size();
        if (n == 0 || n >= prompt.size() || (best && n <= best->tokens.size())) continue;
        if (d.tokens[n - 1] != prompt[n - 1] || d.salt != salt) continue;  // the last token first, as in memory
        if (std::equal(d.tokens.begin(), d.tokens.end(), prompt.begin())) best = &d;
    }
    if (!best) return std::nullopt;
    return DiskCachedHit{best->key, std::int64_t(best->tokens.size())};
}

bool EngineStore::restore_disk_cached(KvCache& cache, int id, const DiskCachedHit& hit,
                                      std::span<const std::int32_t> prompt) {
    const std::optional<Bytes> b = cached_->get_one(hit.key);
    cached_->remove(hit.key);
    std::erase_if(disk_cached_, [&](const DiskCached& d) { return d.key == hit.key; });
    std::uint64_t held = 0;
    for (const DiskCached& d : disk_cached_) held += d.bytes;
    {
        std::lock_guard<std::mutex> lk(mu_);
        disk_cached_stats_.disk_sequences = disk_cached_.size();
        disk_cached_stats_.disk_bytes = held;
    }
    if (b) return restore_state(cache, id, *b, hit.n_tokens, prompt, "a cached sequence read back from disk");
    if (opt_.warn) opt_.warn(fmt::format("kv store: the cached sequence {} cannot be read back from {}", hit.key, parked_dir_));
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.restore_refused;
    return false;
}

PromptCacheStats EngineStore::disk_cached_stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    return disk_cached_stats_;
}

StoreStats EngineStore::stats() const {
    StoreStats s;
    {
        std::lock_guard<std::mutex> lk(mu_);
        s = stats_;
    }
    if (prefix_) s.prefix = prefix_->stats();  // the tiers' own locks, never held across I/O
    if (parked_) {
        const KvStoreStats p = parked_->stats();
        s.spilled_sequences = p.entries;
        s.spilled_bytes = p.bytes;
    }
    return s;
}

void EngineStore::flush() {
    if (prefix_) prefix_->flush();
}

std::vector<std::uint64_t> EngineStore::reported_bytes(std::span<const std::int32_t> prompt) {
    return prefix_ ? prefix_->reported_bytes(prompt) : std::vector<std::uint64_t>{};
}

}  // namespace aqpim::serve
