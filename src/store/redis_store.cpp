// The Redis tier (hiredis): MGET for a chain of blocks in one round trip, SET, DEL, MEMORY USAGE.
// One connection under a mutex; an I/O failure drops it, counts an error, warns (rate-limited) and
// makes every operation answer "absent" at once until the next attempt a second later. An error
// reply (-OOM from a full Redis, -READONLY from a replica) is counted and warned about, and the
// connection stays. The counters have a mutex of their own: stats() never waits for a round trip.

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#include <fmt/format.h>

#include <chrono>
#include <mutex>

#include "store/tiers.h"
#include "store/warn_limiter.h"

namespace aqpim::store {

namespace {

using Clock = std::chrono::steady_clock;

/// hiredis writes with write(2): a peer that went away raises SIGPIPE, which would end a program
/// that has not ignored it. Block it in this thread for the call and discard one that arrived.
class SigpipeGuard {
public:
    SigpipeGuard() {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        sigset_t pending;
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    }
    ~SigpipeGuard() {
        sigset_t pending;
        sigpending(&pending);
        if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
            const timespec zero{0, 0};
            sigtimedwait(&pipe_, nullptr, &zero);
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }

private:
    sigset_t pipe_, old_;
    bool was_pending_ = false;
};

struct ReplyDeleter {
    void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisStore final : public KvStore {
public:
    RedisStore(std::string where, std::string host, int port, int db, WarnFn warn)
        : host_(std::move(host)), port_(port), db_(db), where_(where), warn_(std::move(warn)) {
        stats_.tier = "redis";
        stats_.where = std::move(where);
    }
    ~RedisStore() override {
        if (ctx_) redisFree(ctx_);
    }

    std::vector<std::optional<Bytes>> get(std::span<const std::string> keys) override {
        std::vector<std::optional<Bytes>> out(keys.size());
        if (keys.empty()) return out;
        std::vector<std::string_view> args{"MGET"};
        for (const std::string& k : keys) args.push_back(k);
        std::uint64_t hits = 0, bytes = 0;
        {
            std::lock_guard<std::mutex> lk(mu_);
            const Reply r = command(args);
            if (r && r->type == REDIS_REPLY_ARRAY && r->elements == keys.size()) {
                for (std::size_t i = 0; i < keys.size(); ++i) {
                    const redisReply* e = r->element[i];
                    if (e->type != REDIS_REPLY_STRING) continue;
                    out[i] = Bytes(e->str, e->str + e->len);
                    ++hits;
                    bytes += std::uint64_t(e->len);
                }
            } else if (r) {
                refused("MGET", r.get());
            }
        }
        std::lock_guard<std::mutex> lk(stats_mu_);
        stats_.hits += hits;
        stats_.misses += keys.size() - hits;
        stats_.bytes_read += bytes;
        return out;
    }

    bool put(const std::string& key, std::span<const std::uint8_t> value) override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            const Reply r = command({"SET", key, {reinterpret_cast<const char*>(value.data()), value.size()}});
            if (!r) return false;
            if (r->type == REDIS_REPLY_ERROR) {
                refused("SET", r.get());
                return false;
            }
        }
        std::lock_guard<std::mutex> lk(stats_mu_);
        ++stats_.puts;
        stats_.bytes_written += value.size();
        return true;
    }

    void remove(const std::string& key) override {
        std::lock_guard<std::mutex> lk(mu_);
        (void)command({"DEL", key});
    }

    std::optional<std::uint64_t> reported_bytes(const std::string& key) override {
        std::lock_guard<std::mutex> lk(mu_);
        const Reply r = command({"MEMORY", "USAGE", key});
        if (!r || r->type != REDIS_REPLY_INTEGER) return std::nullopt;
        return std::uint64_t(r->integer);
    }

    KvStoreStats stats() const override {
        std::lock_guard<std::mutex> lk(stats_mu_);
        KvStoreStats s = stats_;
        s.entries = stats_.puts;
        s.bytes = stats_.bytes_written;
        return s;
    }

private:
    /// A command of binary-safe arguments; null when the server cannot be reached (counted).
    Reply command(std::span<const std::string_view> args) {
        if (!connected()) return nullptr;
        std::vector<const char*> argv;
        std::vector<std::size_t> lens;
        for (std::string_view a : args) argv.push_back(a.data()), lens.push_back(a.size());
        SigpipeGuard guard;
        Reply r(static_cast<redisReply*>(redisCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data())));
        if (!r) fail(fmt::format("{}", ctx_->errstr[0] ? ctx_->errstr : "connection lost"));
        return r;
    }
    Reply command(std::initializer_list<std::string_view> args) { return command(std::span(args.begin(), args.size())); }

    bool connected() {
        if (ctx_) return true;
        if (Clock::now() < retry_at_) {
            count_error(false);
            return false;
        }
        SigpipeGuard guard;
        const timeval connect_timeout{0, 500000}, io_timeout{5, 0};
        ctx_ = redisConnectWithTimeout(host_.c_str(), port_, connect_timeout);
        if (!ctx_ || ctx_->err) {
            fail(fmt::format("cannot connect: {}", ctx_ ? ctx_->errstr : "out of memory"));
            return false;
        }
        redisSetTimeout(ctx_, io_timeout);
        if (db_ != 0) {
            Reply r(static_cast<redisReply*>(redisCommand(ctx_, "SELECT %d", db_)));
            if (!r || r->type == REDIS_REPLY_ERROR) {
                fail(fmt::format("SELECT {} failed", db_));
                return false;
            }
        }
        std::lock_guard<std::mutex> lk(stats_mu_);
        stats_.available = true;
        return true;
    }

    void count_error(bool available) {
        std::lock_guard<std::mutex> lk(stats_mu_);
        ++stats_.errors;
        stats_.available = available;
    }

    /// An error reply: the server is there and said no (full, read-only, loading).
    void refused(const char* what, const redisReply* r) {
        count_error(true);
        const std::string_view text = r->type == REDIS_REPLY_ERROR ? std::string_view(r->str, r->len) : "an unexpected reply";
        warn_(fmt::format("kv store {}: {} refused: {}", where_, what, text));
    }

    /// Drop the connection (an I/O failure): the next operation tries again a second from now.
    void fail(const std::string& why) {
        count_error(false);
        if (ctx_) redisFree(ctx_);
        ctx_ = nullptr;
        retry_at_ = Clock::now() + std::chrono::seconds(1);
        warn_(fmt::format("kv store {}: {}; serving without it (retrying every second)", where_, why));
    }

    std::string host_;
    int port_, db_;
    std::string where_;
    WarnLimiter warn_;
    std::mutex mu_;  ///< the connection, held across a round trip
    redisContext* ctx_ = nullptr;
    Clock::time_point retry_at_{};
    mutable std::mutex stats_mu_;
    KvStoreStats stats_;
};

}  // namespace

std::unique_ptr<KvStore> make_redis_store(std::string where, const std::string& host, int port, int db, WarnFn warn) {
    return std::make_unique<RedisStore>(std::move(where), host, port, db, std::move(warn));
}

}  // namespace aqpim::store
