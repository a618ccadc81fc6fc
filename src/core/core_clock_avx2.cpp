#include <immintrin.h>

#include "core/core_clock.h"

namespace aqpim {

std::uint64_t add_loop_avx2(std::uint64_t iterations, bool independent) {
    return vector_add_loop<__m256i>(iterations, independent, _mm256_set1_epi32(1), _mm256_set1_epi32(3));
}

}  // namespace aqpim
