#pragma once
// Per-ISA array conversions; see aqpim/half.h. Tails fall back to the scalar specification.

#include "aqpim/half.h"

namespace aqpim {

void fp16_to_f32_avx2(const f16_t* src, float* dst, std::size_t n);
void f32_to_fp16_avx2(const float* src, f16_t* dst, std::size_t n);
void bf16_to_f32_avx2(const bf16_t* src, float* dst, std::size_t n);
void f32_to_bf16_avx2(const float* src, bf16_t* dst, std::size_t n);

void fp16_to_f32_avx512(const f16_t* src, float* dst, std::size_t n);
void f32_to_fp16_avx512(const float* src, f16_t* dst, std::size_t n);
void bf16_to_f32_avx512(const bf16_t* src, float* dst, std::size_t n);
void f32_to_bf16_avx512(const float* src, bf16_t* dst, std::size_t n);

}  // namespace aqpim
