// AttentionPartial bookkeeping, kernel dispatch, and dense attention over f32/f16 rows.

#include "aqpim/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "aqpim/aligned.h"
#include "aqpim/error.h"
#include "attn/attn_kernels_isa.h"
#include "attn/attn_tiles.h"

namespace aqpim {

namespace {
#define AQPIM_ATTN_TABLE(isa) \
    {softmax_tile_##isa, dense_scores_f32_##isa, dense_scores_f16_##isa, dense_values_f32_##isa, dense_values_f16_##isa}
const AttnKernels kTables[3] = {AQPIM_ATTN_TABLE(ref), AQPIM_ATTN_TABLE(avx2), AQPIM_ATTN_TABLE(avx512)};
#undef AQPIM_ATTN_TABLE

constexpr std::int64_t kDenseTile = 128;  // tokens per tile: a 128 x 128 f16 K or V tile is 32 KiB (L1/L2)

template <class T, class ScoresFn, class ValuesFn>
void attend_dense(const float* q, int n_q, int D, const T* K, const T* V, std::int64_t n_tokens, float scale,
                  AttentionPartial& part, Workspace* workspace, ScoresFn scores_fn, ValuesFn values_fn) {
    AQPIM_CHECK(n_q >= 1 && D >= 1, "attention needs n_q >= 1 and D >= 1 (got n_q={}, D={})", n_q, D);
    AQPIM_CHECK(part.n_q == n_q && part.D == D, "attention partial is [{}][{}], expected [{}][{}]", part.n_q, part.D,
                n_q, D);
    AQPIM_CHECK(n_tokens >= 0, "negative token count {}", n_tokens);
    const AttnKernels& k = dispatch(kTables);
    Workspace local;
    AttentionScratch& ws = workspace_or(workspace, local).get<AttentionScratch>();
    ws.reserve(n_q, D, kDenseTile);
    for (std::int64_t i = 0; i < std::int64_t(n_q) * D; ++i) ws.q[i] = q[i] * scale;
    std::fill(ws.alpha.begin(), ws.alpha.end(), 1.0f);
    for (std::int64_t t0 = 0; t0 < n_tokens; t0 += kDenseTile) {
        const std::int64_t nt = std::min(kDenseTile, n_tokens - t0);
        (k.*scores_fn)(ws.q.data(), n_q, D, K + t0 * D, nt, ws.scores.data(), kDenseTile);
        k.softmax_tile(ws.scores.data(), kDenseTile, n_q, nt, nt, part.max.data(), part.sum.data(), ws.alpha.data());
        rescale_rows(part.acc.data(), n_q, D, ws.alpha.data());
        (k.*values_fn)(ws.scores.data(), kDenseTile, n_q, D, V + t0 * D, nt, part.acc.data());
    }
}

}  // namespace

const AttnKernels& attn_kernels(SimdLevel level) { return kTables[static_cast<int>(level)]; }

void rescale_rows(float* rows, int n_rows, std::int64_t row_len, const float* alpha) {
    for (int r = 0; r < n_rows; ++r) {
        if (alpha[r] == 1.0f) continue;
        float* x = rows + r * row_len;
        for (std::int64_t i = 0; i < row_len; ++i) x[i] *= alpha[r];
    }
}

void AttentionScratch::reserve(int n_q, int D, std::int64_t tile) {
    auto grow = [](AlignedBuffer<float>& b, std::size_t n) {
        if (b.size() < n) b.resize(n);
    };
    grow(q, std::size_t(n_q) * D);
    grow(scores, std::size_t(n_q) * tile);
    alpha.resize(n_q);
}

std::size_t AttentionScratch::bytes() const {
    return heap_bytes(q) + heap_bytes(scores) + heap_bytes(alpha) + heap_bytes(lut) + heap_bytes(qlut) +
           heap_bytes(columns) + heap_bytes(hist) + heap_bytes(acc);
}

void AttentionPartial::reset(int n_q_, int D_) {
    n_q = n_q_;
    D = D_;
    max.assign(n_q, -std::numeric_limits<float>::infinity());
    sum.assign(n_q, 0.0f);
    acc.assign(std::size_t(n_q) * D, 0.0f);
}

void AttentionPartial::merge(const AttentionPartial& o) {
    AQPIM_CHECK(o.n_q == n_q && o.D == D, "cannot merge attention partial [{}][{}] into [{}][{}]", o.n_q, o.D, n_q, D);
    for (int h = 0; h < n_q; ++h) {
        if (o.sum[h] == 0) continue;
        const float m = std::fmax(max[h], o.max[h]);
        const float a = sum[h] == 0 ? 0.0f : std::exp(max[h] - m);
        const float b = std::exp(o.max[h] - m);
        for (int d = 0; d < D; ++d) acc[h * D + d] = acc[h * D + d] * a + o.acc[h * D + d] * b;
        sum[h] = sum[h] * a + o.sum[h] * b;
        max[h] = m;
    }
}

void AttentionPartial::finalize(float* out) const {
    for (int h = 0; h < n_q; ++h) {
        const float inv = sum[h] > 0 ? 1.0f / sum[h] : 0.0f;
        for (int d = 0; d < D; ++d) out[h * D + d] = acc[h * D + d] * inv;
    }
}

void attend_dense_f32(const float* q, int n_q, int D, const float* K, const float* V, std::int64_t n_tokens,
                      float scale, AttentionPartial& part, Workspace* ws) {
    attend_dense(q, n_q, D, K, V, n_tokens, scale, part, ws, &AttnKernels::dense_scores_f32,
                 &AttnKernels::dense_values_f32);
}

void attend_dense_f16(const float* q, int n_q, int D, const f16_t* K, const f16_t* V, std::int64_t n_tokens,
                      float scale, AttentionPartial& part, Workspace* ws) {
    attend_dense(q, n_q, D, K, V, n_tokens, scale, part, ws, &AttnKernels::dense_scores_f16,
                 &AttnKernels::dense_values_f16);
}

}  // namespace aqpim
