#pragma once
// Warnings of a store tier, at most one per interval (a dead Redis fails every lookup).

#include <chrono>
#include <mutex>
#include <string>

#include "aqpim/kv_store.h"

namespace aqpim::store {

class WarnLimiter {
public:
    explicit WarnLimiter(WarnFn warn, std::chrono::seconds interval = std::chrono::seconds(10))
        : warn_(std::move(warn)), interval_(interval) {}
    void operator()(std::string line) {
        if (!warn_) return;
        {
            std::lock_guard<std::mutex> lk(mu_);
            const auto now = std::chrono::steady_clock::now();
            if (said_ && now - last_ < interval_) {
                ++suppressed_;
                return;
            }
            said_ = true;
            last_ = now;
            if (suppressed_ > 0) line += " (" + std::to_string(suppressed_) + " more since the last warning)";
            suppressed_ = 0;
        }
        warn_(line);
    }

private:
    WarnFn warn_;
    std::chrono::seconds interval_;
    std::mutex mu_;
    std::chrono::steady_clock::time_point last_{};
    bool said_ = false;
    std::uint64_t suppressed_ = 0;
};

}  // namespace aqpim::store
