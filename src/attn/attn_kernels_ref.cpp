// Scalar specification of the attention kernels.

#include <cmath>
#include <limits>

#include "attn/attn_kernels_isa.h"

namespace aqpim {

void softmax_tile_ref(float* scores, std::int64_t stride, int n_q, std::int64_t n_valid, std::int64_t n_cols,
                      float* max, float* sum, float* alpha) {
    for (int h = 0; h < n_q; ++h) {
        float* s = scores + h * stride;
        float tile_max = -std::numeric_limits<float>::infinity();
        for (std::int64_t t = 0; t < n_valid; ++t) tile_max = std::fmax(tile_max, s[t]);
        const float new_max = std::fmax(max[h], tile_max);
        alpha[h] = max[h] == new_max ? 1.0f : std::exp(max[h] - new_max);
        float tile_sum = 0;
        for (std::int64_t t = 0; t < n_valid; ++t) {
            s[t] = std::exp(s[t] - new_max);
            tile_sum += s[t];
        }
        for (std::int64_t t = n_valid; t < n_cols; ++t) s[t] = 0;
        sum[h] = sum[h] * alpha[h] + tile_sum;
        max[h] = new_max;
    }
}

template <class T, class Load>
static void dense_scores(const float* q, int n_q, int D, const T* K, std::int64_t n_tok, float* scores,
                         std::int64_t stride, Load load) {
    for (std::int64_t t = 0; t < n_tok; ++t)
        for (int h = 0; h < n_q; ++h) {
            float s = 0;
            for (int d = 0; d < D; ++d) s += q[h * D + d] * load(K[t * D + d]);
            scores[h * stride + t] = s;
        }
}

template <class T, class Load>
static void dense_values(const float* p, std::int64_t stride, int n_q, int D, const T* V, std::int64_t n_tok,
                         float* acc, Load load) {
    for (std::int64_t t = 0; t < n_tok; ++t)
        for (int h = 0; h < n_q; ++h) {
            const float w = p[h * stride + t];
            for (int d = 0; d < D; ++d) acc[h * D + d] += w * load(V[t * D + d]);
        }
}

static float load_f32(float x) { return x; }
static float load_f16(f16_t x) { return fp16_to_f32_scalar(x); }

void dense_scores_f32_ref(const float* q, int n_q, int D, const float* K, std::int64_t n_tok, float* scores,
                          std::int64_t stride) {
    dense_scores(q, n_q, D, K, n_tok, scores, stride, load_f32);
}
void dense_scores_f16_ref(const float* q, int n_q, int D, const f16_t* K, std::int64_t n_tok, float* scores,
                          std::int64_t stride) {
    dense_scores(q, n_q, D, K, n_tok, scores, stride, load_f16);
}
void dense_values_f32_ref(const float* p, std::int64_t stride, int n_q, int D, const float* V, std::int64_t n_tok,
                          float* acc) {
    dense_values(p, stride, n_q, D, V, n_tok, acc, load_f32);
}
void dense_values_f16_ref(const float* p, std::int64_t stride, int n_q, int D, const f16_t* V, std::int64_t n_tok,
                          float* acc) {
    dense_values(p, stride, n_q, D, V, n_tok, acc, load_f16);
}

}  // namespace aqpim
