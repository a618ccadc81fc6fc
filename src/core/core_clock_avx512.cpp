#include <immintrin.h>

#include "core/core_clock.h"

namespace aqpim {

std::uint64_t add_loop_avx512(std::uint64_t iterations, bool independent) {
    return vector_add_loop<__m512i>(iterations, independent, _mm512_set1_epi32(1), _mm512_set1_epi32(3));
}

}  // namespace aqpim
