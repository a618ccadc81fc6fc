// Two `aqpim serve` processes sharing a real redis-server (docs/kv-store.md): the second serves a
// long prompt the first prefilled from Redis, with the same tokens and log probabilities; corrupted
// entries in Redis are counted and prefilled around; Redis killed mid-run: requests still succeed,
// with the failures counted in /metrics and warned about on stderr.

#include <httplib.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <regex>
#include <thread>

#include "serve/http_test_util.h"
#include "support/process.h"
#include "support/redis_server.h"

namespace aqpim {
namespace {

using nlohmann::json;

/// An `aqpim serve` process on a free port, its stderr in a log file.
class ServeProcess {
public:
    ServeProcess(const std::string& model, const std::string& name, std::vector<std::string> extra) {
        std::vector<std::string> argv = {AQPIM_CLI_PATH, "serve",        "-m",          model,           "--kv",
                                         "pq",           "--kv-budget",  "64MiB",       "--parallel",    "4",
                                         "-c",           "512",          "--port",      "0",             "-t",
                                         "1",            "--prefill-chunk", "64",       "--kv-store-block", "64"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        proc_ = std::make_unique<test::Process>(argv, test::temp_path(name + ".log"));
        const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
        for (int i = 0; i < 600 && port_ == 0; ++i) {
            std::smatch m;
            const std::string out = proc_->output();
            if (std::regex_search(out, m, listening)) port_ = std::stoi(m[1]);
            else if (!proc_->running()) throw std::runtime_error("aqpim serve exited: " + out);
            else std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        if (port_ == 0) throw std::runtime_error("aqpim serve did not start: " + proc_->output());
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(120);
        return c;
    }
    json complete(const json& body) const {
        httplib::Client c = client();
        const auto r = c.Post("/v1/completions", body.dump(), "application/json");
        if (!r) throw std::runtime_error("no response");
        EXPECT_EQ(r->status, 200) << r->body;
        return json::parse(r->body);
    }
    /// The value of a metric line `name` (labels included in `name`), -1 if absent.
    double metric(const std::string& name) const {
        httplib::Client c = client();
        const auto r = c.Get("/metrics");
        if (!r) return -1;
        std::istringstream in(r->body);
        for (std::string line; std::getline(in, line);)
            if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
        return -1;
    }
    /// Wait until a metric reaches `at_least` (the store writes on its own thread).
    bool wait_metric(const std::string& name, double at_least) const {
        for (int i = 0; i < 200; ++i) {
            if (metric(name) >= at_least) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return false;
    }
    int stop() { return proc_->stop(SIGTERM); }
    std::string log() const { return proc_->output(); }

private:
    std::unique_ptr<test::Process> proc_;
    int port_ = 0;
};

std::vector<int> prompt_ids(int n, int salt) {
    std::vector<int> p{1};
    for (int i = 1; i < n; ++i) p.push_back(3 + int((std::uint64_t(i) * 2654435761u + std::uint64_t(salt) * 40503u) % 597));
    return p;
}

json request(int n, int salt) {
    return {{"prompt", prompt_ids(n, salt)}, {"max_tokens", 16}, {"temperature", 0}, {"logprobs", 2}};
}

/// Every key in the Redis at `port` (redis-cli, which comes with redis-server).
std::vector<std::string> redis_keys(int port) {
    std::vector<std::string> keys;
    FILE* p = popen(("redis-cli -p " + std::to_string(port) + " --scan").c_str(), "r");
    if (!p) return keys;
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) {
        std::string k(buf);
        while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
        if (!k.empty()) keys.push_back(k);
    }
    pclose(p);
    return keys;
}

TEST(HttpKvStore, TwoServersShareRedisSurviveCorruptionAndItsDeath) {
    AQPIM_REQUIRE_REDIS();
    test::synth_serve_model();  // writes the model file once per process
    const std::string model = test::temp_path("serve_synth.gguf");
    test::RedisServer redis;
    ServeProcess a(model, "serve-a", {"--kv-store", redis.url()});
    ServeProcess b(model, "serve-b", {"--kv-store", redis.url()});

    // A prefills 400 tokens and stores their 6 whole blocks; B restores them from Redis
    const json want = a.complete(request(400, 1));
    ASSERT_TRUE(a.wait_metric("aqpim_kv_store_blocks_stored_total", 6));
    int mains = 0, tails = 0;
    for (const std::string& k : redis_keys(redis.port())) (k.ends_with(".tail") ? tails : mains) += 1;
    EXPECT_EQ(mains, 6);
    EXPECT_LE(tails, 5);  // the last block keeps its tail in its main entry
    const json got = b.complete(request(400, 1));
    EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]);
    EXPECT_EQ(got["choices"][0]["logprobs"], want["choices"][0]["logprobs"]);
    EXPECT_EQ(b.metric("aqpim_kv_store_tokens_restored_total"), 384);  // 399 tokens leave 6 whole blocks
    EXPECT_EQ(b.metric("aqpim_prefill_tokens_total"), 16);
    EXPECT_EQ(b.metric("aqpim_kv_store_lookup_hits_total"), 1);

    // every entry corrupted in place: B counts the first, drops it from Redis and prefills
    for (const std::string& k : redis_keys(redis.port()))
        EXPECT_EQ(std::system(("redis-cli -p " + std::to_string(redis.port()) + " SETRANGE " + k + " 60 XY > /dev/null").c_str()), 0);
    const json again = b.complete(request(400, 1));
    EXPECT_EQ(again["choices"][0]["text"], want["choices"][0]["text"]);
    EXPECT_EQ(b.metric("aqpim_kv_store_rejected_total{reason=\"corrupt\"}"), 1);
    EXPECT_EQ(b.metric("aqpim_kv_store_lookup_hits_total"), 1);

    // Redis killed while A streams a long answer: everything still succeeds
    std::thread stream([&] {
        httplib::Client c = a.client();
        json body = request(300, 2);
        body["stream"] = true;
        body["max_tokens"] = 150;
        const auto r = c.Post("/v1/completions", body.dump(), "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200);
        EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    redis.kill();
    stream.join();
    for (ServeProcess* s : {&a, &b}) {
        const json r = s->complete(request(350, 3));
        EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
        EXPECT_EQ(s->metric("aqpim_kv_store_tier_up{tier=\"redis\",where=\"" + redis.url() + "\"}"), 0);
        EXPECT_GE(s->metric("aqpim_kv_store_tier_errors_total{tier=\"redis\",where=\"" + redis.url() + "\"}"), 1);
    }
    EXPECT_EQ(a.stop(), 0);
    EXPECT_EQ(b.stop(), 0);
    EXPECT_NE(a.log().find("warning: kv store " + redis.url()), std::string::npos) << a.log();
}

}  // namespace
}  // namespace aqpim
