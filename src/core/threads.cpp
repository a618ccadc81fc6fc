// parallel_for over an own pool of sleeping workers instead of an OpenMP parallel region. An
// OpenMP region ends in a barrier that every thread of the team must reach: when another process
// holds the core of one of them (a busy machine, a low-priority job in another scheduling group),
// every region of a decode step waits for that thread's next time slice, and two threads ran at
// 0.43x of one (docs/pq-kernels.md, "Threads on a busy machine"). Here the caller works through
// the chunks itself from the start; a worker helps only once it is actually running, and the call
// returns when every chunk is done and no worker is inside it, never waiting for a worker that has
// not woken up yet. OpenMP still supplies the default thread count (OMP_NUM_THREADS, -t).

#include "aqpim/threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "aqpim/error.h"

namespace aqpim {

namespace {

thread_local int tl_index = 0;  ///< 0: a caller; 1..: a pool worker's place in its current job
thread_local bool tl_in_parallel = false;  ///< inside a parallel_for body (nested calls run serially)

class Pool {
public:
    static Pool& instance() {
        static Pool* pool = new Pool;  // never destroyed: workers may still sleep on it at exit
        return *pool;
    }

    /// Runs the job with up to nt threads (the caller included); false when another thread's job
    /// holds the pool (the caller then runs serially).
    bool try_run(std::int64_t n, std::int64_t chunk, int nt, const std::function<void(std::int64_t)>& body,
                 std::exception_ptr& error) {
        std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
        if (!run.owns_lock()) return false;
        {
            std::lock_guard<std::mutex> lk(mu_);
            while (int(workers_.size()) < nt - 1) {
                workers_.emplace_back([this] { worker(); });
            }
            body_ = &body;
            n_ = n;
            chunk_ = chunk;
            next_.store(0, std::memory_order_relaxed);
            error_ = nullptr;
            wanted_ = nt - 1;
            joined_ = 0;
            open_ = true;
            ++generation_;
        }
        wake_.notify_all();
        run_chunks();
        std::unique_lock<std::mutex> lk(mu_);
        open_ = false;  // no worker joins from now on
        done_.wait(lk, [&] { return inside_ == 0; });
        body_ = nullptr;
        error = error_;
        return true;
    }

private:
    void worker() {
        std::uint64_t seen = 0;
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
            wake_.wait(lk, [&] { return open_ && generation_ != seen && joined_ < wanted_; });
            seen = generation_;
            tl_index = ++joined_;  // 1..wanted_ within this job, whichever worker it is
            ++inside_;
            lk.unlock();
            run_chunks();
            lk.lock();
            if (--inside_ == 0) done_.notify_all();
        }
    }

    void run_chunks() {
        tl_in_parallel = true;
        for (;;) {
            const std::int64_t i0 = next_.fetch_add(chunk_, std::memory_order_relaxed);
            if (i0 >= n_) break;
            const std::int64_t i1 = std::min(n_, i0 + chunk_);
            for (std::int64_t i = i0; i < i1; ++i) {
                try {
                    (*body_)(i);
                } catch (...) {
                    std::lock_guard<std::mutex> lk(error_mu_);
                    if (!error_) error_ = std::current_exception();
                }
            }
        }
        tl_in_parallel = false;
    }

    std::mutex run_mu_;  ///< one job at a time
    std::mutex mu_;      ///< guards the fields below but next_
    std::condition_variable wake_, done_;
    std::vector<std::thread> workers_;
    const std::function<void(std::int64_t)>* body_ = nullptr;
    std::int64_t n_ = 0, chunk_ = 1;
    std::atomic<std::int64_t> next_{0};
    std::uint64_t generation_ = 0;
    int wanted_ = 0;   ///< workers this job may use
    int joined_ = 0;   ///< workers that joined it
    int inside_ = 0;   ///< workers running its chunks now
    bool open_ = false;
    std::mutex error_mu_;
    std::exception_ptr error_;
};

}  // namespace

int default_threads() { return omp_get_max_threads(); }

void set_default_threads(int n) {
    AQPIM_CHECK(n >= 1, "thread count must be >= 1, got {}", n);
    omp_set_num_threads(n);
}

void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body, int n_threads) {
    if (n <= 0) return;
    const int nt = int(std::min<std::int64_t>(n, n_threads > 0 ? n_threads : default_threads()));
    if (nt > 1 && !tl_in_parallel) {
        // Chunks of about an eighth of a thread's share: whoever is running takes the next one.
        const std::int64_t chunk = std::max<std::int64_t>(1, n / (8 * std::int64_t(nt)));
        std::exception_ptr error;
        if (Pool::instance().try_run(n, chunk, nt, body, error)) {
            if (error) std::rethrow_exception(error);
            return;
        }
    }
    for (std::int64_t i = 0; i < n; ++i) body(i);
}

int thread_index() { return tl_index; }

}  // namespace aqpim
