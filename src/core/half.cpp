#include "aqpim/half.h"

#include "core/half_kernels.h"

namespace aqpim {

namespace {

void fp16_to_f32_ref(const f16_t* src, float* dst, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_to_f32_scalar(src[i]);
}
void f32_to_fp16_ref(const float* src, f16_t* dst, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = f32_to_fp16_scalar(src[i]);
}
void bf16_to_f32_ref(const bf16_t* src, float* dst, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32_scalar(src[i]);
}
void f32_to_bf16_ref(const float* src, bf16_t* dst, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16_scalar(src[i]);
}

const HalfKernels kTables[3] = {
    {fp16_to_f32_ref, f32_to_fp16_ref, bf16_to_f32_ref, f32_to_bf16_ref},
    {fp16_to_f32_avx2, f32_to_fp16_avx2, bf16_to_f32_avx2, f32_to_bf16_avx2},
    {fp16_to_f32_avx512, f32_to_fp16_avx512, bf16_to_f32_avx512, f32_to_bf16_avx512},
};

}  // namespace

const HalfKernels& half_kernels(SimdLevel level) { return kTables[static_cast<int>(level)]; }

void fp16_to_f32(const f16_t* src, float* dst, std::size_t n) { dispatch(kTables).fp16_to_f32(src, dst, n); }
void f32_to_fp16(const float* src, f16_t* dst, std::size_t n) { dispatch(kTables).f32_to_fp16(src, dst, n); }
void bf16_to_f32(const bf16_t* src, float* dst, std::size_t n) { dispatch(kTables).bf16_to_f32(src, dst, n); }
void f32_to_bf16(const float* src, bf16_t* dst, std::size_t n) { dispatch(kTables).f32_to_bf16(src, dst, n); }

}  // namespace aqpim
