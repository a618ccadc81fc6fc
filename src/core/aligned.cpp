#include "aqpim/aligned.h"

#include "aqpim/error.h"

namespace aqpim {

void* aligned_malloc(std::size_t bytes) {
    std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    if (rounded == 0) rounded = kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    AQPIM_CHECK(p != nullptr, "out of memory allocating {} bytes", bytes);
    return p;
}

void aligned_free(void* p) noexcept { std::free(p); }

}  // namespace aqpim
