#include "aqpim/aligned.h"

#include "aqpim/error.h"
#include "core/int_math.h"

namespace aqpim {

void* aligned_malloc(std::size_t bytes) {
    std::size_t rounded = round_up(bytes, kAlign);
    if (rounded == 0) rounded = kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    AQPIM_CHECK(p != nullptr, "out of memory allocating {} bytes", bytes);
    return p;
}

void aligned_free(void* p) noexcept { std::free(p); }

}  // namespace aqpim
