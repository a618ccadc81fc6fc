#pragma once
// One thread running jobs in order (the prefix store's fetch and write threads). A job may carry
// bytes counted against a bound until it ends; at the end the queue finishes its jobs (writes: a
// block recorded is a block stored) or drops those not started (lookups nobody waits for).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace aqpim::store {

class JobQueue {
public:
    enum class AtEnd { finish, drop };
    JobQueue(std::uint64_t max_bytes, AtEnd at_end) : max_bytes_(max_bytes), at_end_(at_end), thread_([this] { run(); }) {}
    ~JobQueue() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stopping_ = true;
            if (at_end_ == AtEnd::drop) jobs_.clear();
        }
        cv_.notify_all();
        thread_.join();
    }
    JobQueue(const JobQueue&) = delete;
    JobQueue& operator=(const JobQueue&) = delete;

    /// False (nothing queued) when `bytes` more would pass the bound. Jobs catch their own errors.
    bool push(std::function<void()> job, std::uint64_t bytes = 0) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (bytes > 0 && held_ + bytes > max_bytes_) return false;
            held_ += bytes;
            jobs_.push_back({std::move(job), bytes});
        }
        cv_.notify_all();
        return true;
    }
    /// Wait until every queued job has run.
    void flush() {
        std::unique_lock<std::mutex> lk(mu_);
        idle_.wait(lk, [&] { return jobs_.empty() && !running_; });
    }

private:
    struct Job {
        std::function<void()> run;
        std::uint64_t bytes = 0;
    };
    void run() {
        for (;;) {
            Job job;
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
                if (jobs_.empty()) return;  // stopping, and nothing (more) to run
                job = std::move(jobs_.front());
                jobs_.pop_front();
                running_ = true;
            }
            job.run();
            {
                std::lock_guard<std::mutex> lk(mu_);
                held_ -= job.bytes;
                running_ = false;
            }
            idle_.notify_all();
        }
    }
    std::uint64_t max_bytes_, held_ = 0;
    AtEnd at_end_;
    std::mutex mu_;
    std::condition_variable cv_, idle_;
    std::deque<Job> jobs_;
    bool stopping_ = false, running_ = false;
    std::thread thread_;
};

}  // namespace aqpim::store
