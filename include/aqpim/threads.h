#pragma once
// Threads: library code parallelises with parallel_for (an own pool of sleeping workers, see
// src/core/threads.cpp); the thread count is a run parameter (the command's -t, OpenMP's
// OMP_NUM_THREADS), not a global guess.

#include <cstdint>
#include <functional>

namespace aqpim {

/// Threads parallel regions use by default (OMP_NUM_THREADS, else the number of cores).
int default_threads();
/// Set the default thread count for later parallel regions (n >= 1, else aqpim::Error).
void set_default_threads(int n);

/// Run body(i) for i in [0, n) on up to n_threads threads (0 = default_threads()), handed out
/// dynamically in chunks of about n / (8 threads) (a descheduled thread does not hold up the
/// rest, and the call never waits for a worker that has not started), so results never depend on
/// the thread count or the assignment as long as body(i) only writes data owned by i. A nested
/// call, or one made while another thread's call holds the pool, runs serially on its caller.
/// Exceptions thrown by body are rethrown on the caller's thread (the first one caught).
void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body, int n_threads = 0);

/// Index of the calling thread inside parallel_for: 0 for the caller (and outside), 1.. for the
/// pool's workers.
int thread_index();

}  // namespace aqpim
