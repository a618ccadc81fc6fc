#pragma once
// One thread for a test's lifetime: the development machine's 2 cores are shared, and OpenMP
// barriers stall badly when other processes hold them (the library's results do not depend on the
// thread count).

#include "aqpim/threads.h"

namespace aqpim::test {

struct OneThread {
    int saved = default_threads();
    OneThread() { set_default_threads(1); }
    ~OneThread() { set_default_threads(saved); }
    OneThread(const OneThread&) = delete;
    OneThread& operator=(const OneThread&) = delete;
};

}  // namespace aqpim::test
