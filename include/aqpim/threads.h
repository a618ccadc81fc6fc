#pragma once
// Threads: OpenMP underneath. Library code parallelises with parallel_for; the thread count is a
// run parameter (the command's -t), not a global guess.

#include <cstdint>
#include <functional>

namespace aqpim {

/// Threads parallel regions use by default (OMP_NUM_THREADS, else the number of cores).
int default_threads();
/// Set the default thread count for later parallel regions (n >= 1, else aqpim::Error).
void set_default_threads(int n);

/// Run body(i) for i in [0, n) on up to n_threads threads (0 = default_threads()), static
/// schedule in contiguous chunks so results never depend on the thread count as long as body(i)
/// only writes data owned by i. Exceptions thrown by body are rethrown on the caller's thread.
void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body, int n_threads = 0);

/// Index of the calling thread inside parallel_for (0 outside).
int thread_index();

}  // namespace aqpim
