#pragma once
// What a Python aqpim.KvCache holds: the library's cache, a lock (Python threads may share the
// object while the GIL is released; the library's cache takes one caller at a time) and the
// threads attend() spreads the KV heads over.

#include <memory>
#include <mutex>

#include "aqpim/kv_cache.h"
#include "aqpim/workspace.h"

namespace aqpim::python {

struct PyKvCache {
    std::unique_ptr<KvCache> cache;
    std::mutex mu;
    int n_threads = 1;  ///< threads of attend() across KV heads (0 = aqpim.default_threads())
    ThreadWorkspaces workspaces;  ///< attend()'s scratch, one per thread, kept from call to call
};

/// A cache of that scheme ("pq:m=32,...", the --kv grammar) for `shape`, holding sequence 0.
std::shared_ptr<PyKvCache> make_py_kv_cache(const std::string& scheme, const KvShape& shape, std::int64_t context,
                                            std::uint64_t memory_budget, int n_threads);

}  // namespace aqpim::python
