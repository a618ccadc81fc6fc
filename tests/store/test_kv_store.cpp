// The tiers of the KV store: the same contract for memory, disk and a real redis-server (values
// round-trip, a miss is nullopt, stats count what happened), each tier's own rules (LRU under a
// byte budget, files written whole and kept across restarts under a cap, a dead Redis answering
// "absent" with an error counted and coming back when Redis does), and bad specs named.

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "aqpim/error.h"
#include "aqpim/kv_store.h"
#include "support/redis_server.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;

Bytes value(std::size_t n, std::uint8_t seed) {
    Bytes b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = std::uint8_t(seed + i * 7);
    return b;
}

/// What every tier does.
void check_contract(KvStore& s) {
    const Bytes a = value(1000, 1), b = value(70000, 2), empty;
    EXPECT_FALSE(s.get_one("k1").has_value());
    EXPECT_TRUE(s.put("k1", a));
    EXPECT_TRUE(s.put("k2", b));
    EXPECT_TRUE(s.put("k3", empty));
    EXPECT_EQ(s.get_one("k1"), a);
    const std::vector<std::string> keys = {"k2", "nope", "k1", "k3"};
    const auto got = s.get(keys);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[0], b);
    EXPECT_FALSE(got[1].has_value());
    EXPECT_EQ(got[2], a);
    EXPECT_EQ(got[3], empty);
    EXPECT_TRUE(s.put("k1", b));  // replaced
    EXPECT_EQ(s.get_one("k1"), b);
    EXPECT_GE(s.reported_bytes("k2").value_or(0), b.size() / 2);  // what the backend accounts (disk rounds to blocks)
    EXPECT_FALSE(s.reported_bytes("nope").has_value());
    s.remove("k1");
    EXPECT_FALSE(s.get_one("k1").has_value());
    const KvStoreStats st = s.stats();
    EXPECT_EQ(st.hits, 5u);
    EXPECT_EQ(st.misses, 3u);
    EXPECT_EQ(st.puts, 4u);
    EXPECT_EQ(st.errors, 0u);
    EXPECT_TRUE(st.available);
}

TEST(KvStoreTiers, MemoryKeepsTheRecentlyUsedUnderItsBudget) {
    const auto s = make_kv_store("memory");
    check_contract(*s);
    const auto small = make_kv_store("memory:10000");
    EXPECT_EQ(small->stats().capacity_bytes, 10000u);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(small->put("v" + std::to_string(i), value(2000, std::uint8_t(i))));
    EXPECT_TRUE(small->get_one("v0").has_value());  // v0 is now the most recent: v1 goes first
    EXPECT_TRUE(small->put("v4", value(2000, 4)));
    EXPECT_TRUE(small->put("v5", value(2000, 5)));
    EXPECT_FALSE(small->get_one("v1").has_value());
    EXPECT_TRUE(small->get_one("v0").has_value());
    EXPECT_TRUE(small->get_one("v5").has_value());
    const KvStoreStats st = small->stats();
    EXPECT_LE(st.bytes, 10000u);
    EXPECT_GE(st.evictions, 1u);
    EXPECT_FALSE(small->put("huge", value(20000, 9)));  // larger than the whole tier: refused
    EXPECT_TRUE(small->get_one("v5").has_value());      // and nothing evicted for it
}

TEST(KvStoreTiers, DiskWritesWholeFilesKeepsThemAcrossRestartsUnderACap) {
    const std::string dir = test::temp_path("kvstore-disk");
    {
        const auto s = make_kv_store("disk:" + dir);
        check_contract(*s);
        EXPECT_EQ(s->stats().where, "disk:" + dir);
    }
    {
        const auto s = make_kv_store("disk:" + dir + ":200KiB");
        EXPECT_EQ(s->stats().capacity_bytes, 200u * 1024);
        EXPECT_EQ(s->get_one("k2"), value(70000, 2));  // written by the first instance
        for (int i = 0; i < 5; ++i) EXPECT_TRUE(s->put("f" + std::to_string(i), value(50000, std::uint8_t(i))));
        EXPECT_LE(s->stats().bytes, 200u * 1024);
        EXPECT_FALSE(s->get_one("f0").has_value());
        EXPECT_TRUE(s->get_one("f4").has_value());
        EXPECT_FALSE(s->put("../escape", value(10, 1)));  // keys are file names, never paths
        EXPECT_FALSE(s->put(".hidden", value(10, 1)));
        EXPECT_GE(s->stats().errors, 2u);
    }
    // nothing but whole values in the directory (no temporary files)
    for (const auto& e : fs::directory_iterator(dir)) EXPECT_TRUE(e.path().string().ends_with(".aqkv")) << e.path();
    // a file removed behind the store's back is a miss, not a crash
    const auto s = make_kv_store("disk:" + dir + ":200KiB");
    fs::remove(fs::path(dir) / "f4.aqkv");
    EXPECT_FALSE(s->get_one("f4").has_value());
    // a leftover temporary file of an interrupted write is removed at start, one being written
    // (by another server on the same directory) is not
    const fs::path stale = fs::path(dir) / "f9.aqkv.ABC123", fresh = fs::path(dir) / "f8.aqkv.DEF456";
    { std::ofstream(stale) << "partial"; }
    { std::ofstream(fresh) << "partial"; }
    fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(1));
    const auto again = make_kv_store("disk:" + dir + ":200KiB");
    EXPECT_FALSE(fs::exists(stale));
    EXPECT_TRUE(fs::exists(fresh));
    fs::remove(fresh);
}

TEST(KvStoreTiers, RedisSharedAndDeadThenBack) {
    AQPIM_REQUIRE_REDIS();
    test::RedisServer redis;
    std::vector<std::string> warnings;
    std::mutex mu;
    const auto warn = [&](const std::string& w) {
        std::lock_guard<std::mutex> lk(mu);
        warnings.push_back(w);
    };
    const auto s = make_kv_store(redis.url(), warn);
    check_contract(*s);
    EXPECT_GT(*s->reported_bytes("k2"), 70000u);  // Redis's own MEMORY USAGE
    // another client (a second replica) sees the same values
    const auto other = make_kv_store(redis.url() + "/0");
    EXPECT_EQ(other->get_one("k2"), value(70000, 2));

    redis.kill();
    EXPECT_FALSE(s->get_one("k2").has_value());
    EXPECT_FALSE(s->put("k9", value(10, 1)));
    KvStoreStats st = s->stats();
    EXPECT_FALSE(st.available);
    EXPECT_GE(st.errors, 2u);
    {
        std::lock_guard<std::mutex> lk(mu);
        ASSERT_FALSE(warnings.empty());
        EXPECT_NE(warnings[0].find(redis.url()), std::string::npos) << warnings[0];
    }
    redis.start();  // empty again
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the retry interval
    EXPECT_TRUE(s->put("k9", value(10, 1)));
    EXPECT_EQ(s->get_one("k9"), value(10, 1));
    EXPECT_TRUE(s->stats().available);
}

TEST(KvStoreTiers, AFullRedisRefusesWritesAndStillServesReads) {
    AQPIM_REQUIRE_REDIS();
    test::RedisServer redis({"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"});
    const auto s = make_kv_store(redis.url());
    ASSERT_TRUE(s->put("small", value(1000, 1)));
    int refused = 0;
    for (int i = 0; i < 8 && refused == 0; ++i) refused += !s->put("big" + std::to_string(i), value(1 << 20, std::uint8_t(i)));
    EXPECT_GT(refused, 0);  // -OOM once full
    EXPECT_EQ(s->get_one("small"), value(1000, 1));  // the connection stays: reads go on
    const KvStoreStats st = s->stats();
    EXPECT_TRUE(st.available);
    EXPECT_GE(st.errors, 1u);
}

TEST(KvStoreTiers, TwoServersOnOneDirectorySeeEachOthersFiles) {
    const std::string dir = test::temp_path("kvstore-shared-dir");
    const auto a = make_kv_store("disk:" + dir), b = make_kv_store("disk:" + dir);
    EXPECT_TRUE(a->put("from-a", value(5000, 3)));
    EXPECT_EQ(b->get_one("from-a"), value(5000, 3));  // written after b started
    EXPECT_EQ(b->stats().entries, 1u);                 // and now counted by b
    a->remove("from-a");
    EXPECT_FALSE(b->get_one("from-a").has_value());
    EXPECT_EQ(b->stats().entries, 0u);
}

TEST(KvStoreTiers, BadSpecsAreNamed) {
    for (const std::string spec : {"", "mem", "memory:lots", "memory:-5", "disk:", "redis://", "redis://h:0",
                                   "redis://h:99999", "redis://h:12/x", "file:/tmp"}) {
        try {
            make_kv_store(spec);
            ADD_FAILURE() << "accepted '" << spec << "'";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--kv-store"), std::string::npos) << e.what();
        }
    }
    // a directory that cannot be one
    const std::string file = test::temp_path("kvstore-a-file");
    { std::ofstream(file) << "x"; }
    EXPECT_THROW(make_kv_store("disk:" + file), Error);
}

}  // namespace
}  // namespace aqpim
