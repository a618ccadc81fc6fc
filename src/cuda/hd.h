#pragma once
// AQPIM_HD marks arithmetic shared by the CUDA kernels and the CPU: under nvcc it is
// `__host__ __device__`, under a plain C++ compiler nothing, so the CPU tests (tests/cuda) run the
// very functions the kernels call, against the CPU reference attention.

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define AQPIM_HD __host__ __device__ __forceinline__
#define AQPIM_UNROLL _Pragma("unroll")
#else
#include <cmath>
#define AQPIM_HD inline
#define AQPIM_UNROLL
#endif

#include "aqpim/half.h"

namespace aqpim::cuda {

inline constexpr float kNegInf = -__builtin_huge_valf();

AQPIM_HD float hd_exp(float x) {
#if defined(__CUDA_ARCH__)
    return __expf(x);  // ex2.approx: relative error ~2 ulp, far under the f16 inputs' rounding
#else
    return std::exp(x);
#endif
}

AQPIM_HD float hd_max(float a, float b) { return a > b ? a : b; }

/// IEEE binary16 bits -> f32 (exact).
AQPIM_HD float hd_half_to_float(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    return fp16_to_f32_scalar(h);
#endif
}

}  // namespace aqpim::cuda
