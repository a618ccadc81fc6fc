// Scalar specification of the turbo / qjl decode kernels, and the kernel table.

#include "kv/turbo_kernels.h"

namespace aqpim::kv {

void turbo_centroids_ref(const std::uint8_t* codes, int n, int bits, const float* c, float scale, float* out) {
    const std::uint32_t mask = (1u << bits) - 1;
    std::uint32_t acc = 0;
    int n_acc = 0;
    for (int j = 0; j < n; ++j) {
        for (; n_acc < bits; n_acc += 8) acc |= std::uint32_t(*codes++) << n_acc;
        out[j] = scale * c[acc & mask];
        acc >>= bits;
        n_acc -= bits;
    }
}

void turbo_signs_ref(const std::uint8_t* bits, int m, float v, float* out) {
    for (int i = 0; i < m; ++i) out[i] = (bits[i / 8] >> (i % 8)) & 1 ? v : -v;
}

const TurboKernels& turbo_kernels(SimdLevel level) {
    static const TurboKernels tables[3] = {{turbo_centroids_ref, turbo_signs_ref},
                                           {turbo_centroids_avx2, turbo_signs_avx2},
                                           {turbo_centroids_avx512, turbo_signs_avx512}};
    return tables[static_cast<int>(level)];
}

}  // namespace aqpim::kv
