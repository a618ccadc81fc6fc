#pragma once
// A real redis-server on a free loopback port for one test (Debian's redis-server, installed by
// scripts/setup.sh); tests skip, saying so, when the binary is absent.

#include <filesystem>
#include <memory>
#include <string>

#include "support/process.h"
#include "support/temp_dir.h"

namespace aqpim::test {

inline const char* kRedisServer = "/usr/bin/redis-server";

#define AQPIM_REQUIRE_REDIS()                                                                                  \
    do {                                                                                                       \
        if (!std::filesystem::exists(::aqpim::test::kRedisServer))                                             \
            GTEST_SKIP() << "redis-server is not installed at " << ::aqpim::test::kRedisServer                 \
                         << " (scripts/setup.sh installs it)";                                                 \
    } while (0)

class RedisServer {
public:
    /// `extra`: more redis-server options (e.g. {"--maxmemory", "1mb"}).
    explicit RedisServer(std::vector<std::string> extra = {}) : port_(free_loopback_port()), extra_(std::move(extra)) {
        start();
    }
    int port() const { return port_; }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
    /// SIGKILL: the server is gone at once, with everything it held.
    void kill() { proc_.reset(); }
    /// A new, empty server on the same port.
    void start() {
        std::vector<std::string> argv{kRedisServer, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning"};
        argv.insert(argv.end(), extra_.begin(), extra_.end());
        proc_ = std::make_unique<Process>(argv, temp_path("redis-" + std::to_string(port_) + ".log"));
        for (int i = 0; i < 500 && !port_open(port_); ++i) {
            if (!proc_->running()) throw std::runtime_error("redis-server exited: " + proc_->output());
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (!port_open(port_)) throw std::runtime_error("redis-server did not start: " + proc_->output());
    }

private:
    int port_;
    std::vector<std::string> extra_;
    std::unique_ptr<Process> proc_;
};

}  // namespace aqpim::test
