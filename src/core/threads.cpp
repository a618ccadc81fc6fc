#include "aqpim/threads.h"

#include <omp.h>

#include <exception>
#include <mutex>

#include "aqpim/error.h"

namespace aqpim {

int default_threads() { return omp_get_max_threads(); }

void set_default_threads(int n) {
    AQPIM_CHECK(n >= 1, "thread count must be >= 1, got {}", n);
    omp_set_num_threads(n);
}

void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body, int n_threads) {
    if (n <= 0) return;
    int nt = n_threads > 0 ? n_threads : default_threads();
    if (nt == 1 || n == 1) {
        for (std::int64_t i = 0; i < n; ++i) body(i);
        return;
    }
    std::exception_ptr first_error;
    std::mutex mu;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (std::int64_t i = 0; i < n; ++i) {
        try {
            body(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!first_error) first_error = std::current_exception();
        }
    }
    if (first_error) std::rethrow_exception(first_error);
}

int thread_index() { return omp_get_thread_num(); }

}  // namespace aqpim
