#pragma once
// Software prefetch of byte ranges, one request per cache line (never faults, so ranges may run
// past the end of a buffer). Used where a kernel's access order is not one the hardware
// prefetcher follows from DRAM, or where it needs data further ahead than it looks.

#include <xmmintrin.h>

#include <cstddef>

namespace aqpim {

/// Into L1 (and L2).
inline void prefetch_l1(const void* p, std::size_t n) {
    const char* c = static_cast<const char*>(p);
    for (std::size_t off = 0; off < n; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

/// Into L2.
inline void prefetch_l2(const void* p, std::size_t n) {
    const char* c = static_cast<const char*>(p);
    for (std::size_t off = 0; off < n; off += 64) _mm_prefetch(c + off, _MM_HINT_T1);
}

}  // namespace aqpim
