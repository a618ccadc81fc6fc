#pragma once
// Per-ISA entries of aqpim::AttnKernels (contracts in aqpim/attention.h).

#include "aqpim/attention.h"

namespace aqpim {

#define AQPIM_DECLARE_ATTN_KERNELS(isa)                                                                          \
    void softmax_tile_##isa(float* scores, std::int64_t stride, int n_q, std::int64_t n_valid,                  \
                            std::int64_t n_cols, float* max, float* sum, float* alpha);                          \
    void dense_scores_f32_##isa(const float* q, int n_q, int D, const float* K, std::int64_t n_tok,              \
                                float* scores, std::int64_t stride);                                              \
    void dense_scores_f16_##isa(const float* q, int n_q, int D, const f16_t* K, std::int64_t n_tok,              \
                                float* scores, std::int64_t stride);                                              \
    void dense_values_f32_##isa(const float* p, std::int64_t stride, int n_q, int D, const float* V,             \
                                std::int64_t n_tok, float* acc);                                                  \
    void dense_values_f16_##isa(const float* p, std::int64_t stride, int n_q, int D, const f16_t* V,             \
                                std::int64_t n_tok, float* acc);

AQPIM_DECLARE_ATTN_KERNELS(ref)
AQPIM_DECLARE_ATTN_KERNELS(avx2)
AQPIM_DECLARE_ATTN_KERNELS(avx512)

#undef AQPIM_DECLARE_ATTN_KERNELS

}  // namespace aqpim
