#pragma once
// Decode kernels of the turbo / qjl rows (turbo_codec.h), per SIMD level: what rotated-domain
// attention spends its time on (every coded token is widened once per call). `_ref` is the
// specification; tests compare every level with it on odd sizes.

#include <cstdint>

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

#define AQPIM_DECLARE_TURBO_KERNELS(isa)                                                                       \
    void turbo_centroids_##isa(const std::uint8_t* codes, int n, int bits, const float* c, float scale, float* out); \
    void turbo_signs_##isa(const std::uint8_t* bits, int m, float v, float* out);

AQPIM_DECLARE_TURBO_KERNELS(ref)
AQPIM_DECLARE_TURBO_KERNELS(avx2)
AQPIM_DECLARE_TURBO_KERNELS(avx512)

#undef AQPIM_DECLARE_TURBO_KERNELS

}  // namespace aqpim::kv
