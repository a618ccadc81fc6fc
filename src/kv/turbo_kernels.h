#pragma once
// Decode kernels of the turbo / qjl rows (turbo_codec.h), per SIMD level: what rotated-domain
// attention spends its time on (every coded token is widened once per call). `_ref` is the
// specification; tests compare every level with it on odd sizes.

#include <cstdint>
#include <type_traits>

#include "aqpim/simd.h"

namespace aqpim::kv {

struct TurboKernels {
    /// out[j] = scale * c[code j] for j < n, the codes a little-endian stream of `bits`-bit fields
    /// (kv/scalar_codec.h pack_bits layout); c has 2^bits entries, bits in 1..8.
    void (*centroids)(const std::uint8_t* codes, int n, int bits, const float* c, float scale, float* out);
    /// out[i] = v if bit i of the stream is set, else -v, for i < m.
    void (*signs)(const std::uint8_t* bits, int m, float v, float* out);
};

const TurboKernels& turbo_kernels(SimdLevel level);

/// f(std::integral_constant<int, B>{}) for the code widths B = 1..4 the vector kernels specialise;
/// false (f not called) for any other width.
template <class F>
bool with_vector_bits(int bits, F&& f) {
    switch (bits) {
        case 1: f(std::integral_constant<int, 1>{}); return true;
        case 2: f(std::integral_constant<int, 2>{}); return true;
        case 3: f(std::integral_constant<int, 3>{}); return true;
        case 4: f(std::integral_constant<int, 4>{}); return true;
        default: return false;
    }
}

#define AQPIM_DECLARE_TURBO_KERNELS(isa)                                                                       \
    void turbo_centroids_##isa(const std::uint8_t* codes, int n, int bits, const float* c, float scale, float* out); \
    void turbo_signs_##isa(const std::uint8_t* bits, int m, float v, float* out);

AQPIM_DECLARE_TURBO_KERNELS(ref)
AQPIM_DECLARE_TURBO_KERNELS(avx2)
AQPIM_DECLARE_TURBO_KERNELS(avx512)

#undef AQPIM_DECLARE_TURBO_KERNELS

}  // namespace aqpim::kv
