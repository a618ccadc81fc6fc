#pragma once
// fp16 (IEEE binary16) and bf16 conversion. The scalar functions here are the bit-exact
// specification (round to nearest even, NaN kept quiet, subnormals exact); the array functions
// dispatch to F16C / AVX-512 kernels (F16C is not part of the x86-64-v2 baseline).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "aqpim/simd.h"

namespace aqpim {

using f16_t = std::uint16_t;   ///< raw IEEE binary16 bits
using bf16_t = std::uint16_t;  ///< raw bfloat16 bits (upper half of an f32)

inline float f32_from_bits(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline std::uint32_t bits_from_f32(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

/// binary16 -> f32, exact.
inline float fp16_to_f32_scalar(f16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u));
    if (exp == 0) {
        // zero or subnormal: man * 2^-24
        float v = float(man) * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/// f32 -> binary16, round to nearest even; overflow -> inf; NaN -> quiet NaN.
inline f16_t f32_to_fp16_scalar(float f) {
    std::uint32_t x = bits_from_f32(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return f16_t(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u | ((x >> 13) & 0x3ffu) : 0u));
    if (x >= 0x477ff000u) return f16_t(sign | 0x7c00u);  // rounds to >= 65520 -> inf
    if (x < 0x38800000u) {
        // result is subnormal or zero: add 0.5 (as f32 magic) so the FPU rounds to nearest even
        float v = f32_from_bits(x) + 0.5f;
        return f16_t(sign | (bits_from_f32(v) - 0x3f000000u));
    }
    const std::uint32_t mant_odd = (x >> 13) & 1u;
    x += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    return f16_t(sign | (x >> 13));
}

/// bf16 -> f32, exact.
inline float bf16_to_f32_scalar(bf16_t h) { return f32_from_bits(std::uint32_t(h) << 16); }

/// f32 -> bf16, round to nearest even; NaN -> quiet NaN.
inline bf16_t f32_to_bf16_scalar(float f) {
    std::uint32_t x = bits_from_f32(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return bf16_t((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return bf16_t(x >> 16);
}

// ---- array conversions (dispatched) -----------------------------------------------------------

void fp16_to_f32(const f16_t* src, float* dst, std::size_t n);
void f32_to_fp16(const float* src, f16_t* dst, std::size_t n);
void bf16_to_f32(const bf16_t* src, float* dst, std::size_t n);
void f32_to_bf16(const float* src, bf16_t* dst, std::size_t n);

/// One kernel table per SIMD level (tests compare every level with ref).
struct HalfKernels {
    void (*fp16_to_f32)(const f16_t*, float*, std::size_t);
    void (*f32_to_fp16)(const float*, f16_t*, std::size_t);
    void (*bf16_to_f32)(const bf16_t*, float*, std::size_t);
    void (*f32_to_bf16)(const float*, bf16_t*, std::size_t);
};
const HalfKernels& half_kernels(SimdLevel level);

}  // namespace aqpim
