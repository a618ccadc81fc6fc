// Weight formats: dispatch of the per-level kernels, llama.cpp-compatible quantizers, and the
// decode product matvec. matmul lives in matmul.cpp. See docs/weights.md.

#include <algorithm>
#include <cmath>
#include <cstring>

#include <smmintrin.h>

#include "aqpim/error.h"
#include "aqpim/threads.h"
#include "aqpim/weights.h"
#include "model/quant_blocks.h"
#include "simd/sse_util.h"
#include "core/int_math.h"

namespace aqpim {

namespace quant {

namespace {

const QuantKernels kTables[3] = {
    {dequantize_ref, prepare_x_ref, dot_rows_ref},
    {dequantize_avx2, prepare_x_avx2, dot_rows_avx2, nullptr, dot_rows_invariant_avx2, dot_rows_batch_quantized_avx2,
     InvariantBlocksAvx2::activations},
    {dequantize_avx512, prepare_x_avx512, dot_rows_avx512, dot_rows_batch_avx512, dot_rows_invariant_avx512,
     dot_rows_batch_quantized_avx512, InvariantBlocks::activations},
};

/// llama.cpp's nearest_int: round half to even (the magic-number trick), for |v| < 2^22.
int nearest_int(float v) { return int(std::nearbyint(v)); }

/// One Q8_0 block: d = amax / 127, qs = std::round(x / d) (ties away from zero, as ggml's
/// roundf), in SSE4.1 (the build's x86-64-v2 baseline), 4 values per instruction. Rounding is
/// truncation plus one step away from zero where |v - trunc(v)| >= 0.5, exact for every float
/// (v - trunc(v) is exact). The KV cache's q8_0 rows (`wq=q8_0` windows, the q8_0 scheme) pass
/// here once per row: scalar, it was 5% of a pq:bits=2 serve run's CPU.
void quantize_block_q8_0(const float* x, BlockQ8_0& y) {
    const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    __m128 vmax = _mm_setzero_ps();
    for (int j = 0; j < QK; j += 4) vmax = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + j), abs_mask), vmax);
    const float amax = sse::hmax(vmax);
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y.d = f32_to_fp16_scalar(d);
    const __m128 vid = _mm_set1_ps(id), half = _mm_set1_ps(0.5f), one = _mm_set1_ps(1.0f);
    const __m128 sign_mask = _mm_castsi128_ps(_mm_set1_epi32(int(0x80000000u)));
    __m128i q32[QK / 4];
    for (int j = 0; j < QK; j += 4) {
        const __m128 v = _mm_mul_ps(_mm_loadu_ps(x + j), vid);
        const __m128 t = _mm_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m128 away = _mm_cmpge_ps(_mm_and_ps(_mm_sub_ps(v, t), abs_mask), half);
        const __m128 step = _mm_and_ps(away, _mm_or_ps(one, _mm_and_ps(v, sign_mask)));
        q32[j / 4] = _mm_cvttps_epi32(_mm_add_ps(t, step));
    }
    for (int k = 0; k < QK / 16; ++k) {
        const __m128i lo = _mm_packs_epi32(q32[4 * k], q32[4 * k + 1]);
        const __m128i hi = _mm_packs_epi32(q32[4 * k + 2], q32[4 * k + 3]);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs + 16 * k), _mm_packs_epi16(lo, hi));
    }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, x += QK) quantize_block_q8_0(x, y[i]);
}

void quantize_q4_0(const float* x, BlockQ4_0* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, x += QK) {
        // The value of largest magnitude maps to -8 exactly (its sign decides d's sign), so the
        // 16 levels -8..7 cover [-amax, amax * 7/8] on the side that matters.
        float amax = 0, max = 0;
        for (int j = 0; j < QK; ++j)
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        const float d = max / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16_scalar(d);
        for (int j = 0; j < QK / 2; ++j) {
            const int q0 = std::min(15, int(x[j] * id + 8.5f));  // truncation, as llama.cpp's (int8_t) cast
            const int q1 = std::min(15, int(x[j + QK / 2] * id + 8.5f));
            y[i].qs[j] = std::uint8_t(q0 | (q1 << 4));
        }
    }
}

/// Simple Q4_K quantizer (not llama.cpp's importance-weighted search): each sub-block of 32 gets
/// min = min(0, min x) and scale = (max - min) / 15; scales and mins are rounded to 6 bits on
/// the super-block's grid (d = max scale / 63, dmin = max min / 63), then every value is
/// re-quantized against the rounded scale and min it will be decoded with.
void quantize_q4_k(const float* x, BlockQ4_K* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, x += QK_K) {
        float scales[8], mins[8], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; ++j) {
            const float* xs = x + 32 * j;
            float lo = xs[0], hi = xs[0];
            for (int l = 1; l < 32; ++l) {
                lo = std::min(lo, xs[l]);
                hi = std::max(hi, xs[l]);
            }
            lo = std::min(lo, 0.0f);
            scales[j] = (hi - lo) / 15.0f;
            mins[j] = -lo;
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        BlockQ4_K& b = y[i];
        std::memset(b.scales, 0, sizeof(b.scales));
        for (int j = 0; j < 8; ++j) {
            const std::uint8_t ls = std::uint8_t(std::min(63, nearest_int(inv_scale * scales[j])));
            const std::uint8_t lm = std::uint8_t(std::min(63, nearest_int(inv_min * mins[j])));
            if (j < 4) {
                b.scales[j] = ls;
                b.scales[j + 4] = lm;
            } else {
                b.scales[j + 4] = std::uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
                b.scales[j - 4] |= std::uint8_t((ls >> 4) << 6);
                b.scales[j] |= std::uint8_t((lm >> 4) << 6);
            }
        }
        b.d = f32_to_fp16_scalar(max_scale / 63.0f);
        b.dmin = f32_to_fp16_scalar(max_min / 63.0f);
        std::uint8_t sc[8], m[8], L[QK_K];
        unpack_q4k_scales(b.scales, sc, m);
        for (int j = 0; j < 8; ++j) {
            const float d = fp16_to_f32_scalar(b.d) * float(sc[j]);
            const float dm = fp16_to_f32_scalar(b.dmin) * float(m[j]);
            for (int l = 0; l < 32; ++l)
                L[32 * j + l] = d != 0 ? std::uint8_t(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, 15)) : 0;
        }
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = std::uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/// Simple Q6_K quantizer (llama.cpp's structure without its per-group scale search): each group
/// of 16 gets scale = (its value of largest magnitude) / -32, the scales are rounded to int8 on
/// the super-block grid d = (largest scale) / -128, and values re-quantized to -32..31.
void quantize_q6_k(const float* x, BlockQ6_K* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, x += QK_K) {
        BlockQ6_K& b = y[i];
        float scales[16], max_scale = 0, max_abs_scale = 0;
        for (int g = 0; g < 16; ++g) {
            float amax = 0, max = 0;
            for (int l = 0; l < 16; ++l)
                if (amax < std::fabs(x[16 * g + l])) {
                    amax = std::fabs(x[16 * g + l]);
                    max = x[16 * g + l];
                }
            scales[g] = max / -32.0f;
            if (std::fabs(scales[g]) > max_abs_scale) {
                max_abs_scale = std::fabs(scales[g]);
                max_scale = scales[g];
            }
        }
        std::memset(&b, 0, sizeof(b));
        if (max_abs_scale == 0) continue;  // all zero: d = 0, every q = 0
        const float iscale = -128.0f / max_scale;
        b.d = f32_to_fp16_scalar(1 / iscale);
        for (int g = 0; g < 16; ++g) b.scales[g] = std::int8_t(std::min(127, nearest_int(iscale * scales[g])));
        std::uint8_t L[QK_K];
        for (int g = 0; g < 16; ++g) {
            const float d = fp16_to_f32_scalar(b.d) * float(b.scales[g]);
            for (int l = 0; l < 16; ++l)
                L[16 * g + l] = d != 0 ? std::uint8_t(std::clamp(nearest_int(x[16 * g + l] / d), -32, 31) + 32) : 32;
        }
        for (int h = 0; h < 2; ++h) {
            const std::uint8_t* Lh = L + 128 * h;
            for (int l = 0; l < 32; ++l) {
                b.ql[64 * h + l] = std::uint8_t((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                b.ql[64 * h + l + 32] = std::uint8_t((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                b.qh[32 * h + l] = std::uint8_t((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                                ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/// Validates a (type, n) pair for dequantize / quantize.
void check_values(GgmlType type, std::int64_t n, const char* what) {
    require_supported_type(type, what);
    AQPIM_CHECK(n >= 0, "{}: negative value count {}", what, n);
    ggml_row_bytes(type, n);  // throws if n is not a whole number of blocks
}

}  // namespace

const QuantKernels& quant_kernels(SimdLevel level) { return kTables[static_cast<int>(level)]; }

}  // namespace quant

using namespace quant;

void dequantize(GgmlType type, const void* src, float* dst, std::int64_t n) {
    check_values(type, n, "dequantize");
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, std::size_t(n) * 4); return;
        case GgmlType::F16: fp16_to_f32(static_cast<const f16_t*>(src), dst, std::size_t(n)); return;
        case GgmlType::BF16: bf16_to_f32(static_cast<const bf16_t*>(src), dst, std::size_t(n)); return;
        default: dispatch(kTables).dequantize(type, src, dst, n);
    }
}

void quantize(GgmlType type, const float* src, void* dst, std::int64_t n) {
    check_values(type, n, "quantize");
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, std::size_t(n) * 4); return;
        case GgmlType::F16: f32_to_fp16(src, static_cast<f16_t*>(dst), std::size_t(n)); return;
        case GgmlType::BF16: f32_to_bf16(src, static_cast<bf16_t*>(dst), std::size_t(n)); return;
        case GgmlType::Q8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n / QK); return;
        case GgmlType::Q4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n / QK); return;
        case GgmlType::Q4_K: quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n / QK_K); return;
        case GgmlType::Q6_K: quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n / QK_K); return;
        default: AQPIM_FAIL("quantize: no quantizer for {}", ggml_type_name(type));
    }
}

void dequantize_row(const WeightMatrix& W, std::int64_t r, float* out) {
    AQPIM_CHECK(!W.empty(), "dequantize_row: weight matrix has no data");
    AQPIM_CHECK(r >= 0 && r < W.rows, "dequantize_row: row {} out of range [0, {})", r, W.rows);
    dequantize(W.type, W.row(r), out, W.cols);
}

namespace quant {

void check_matrix(const WeightMatrix& W, const char* what) {
    require_supported_type(W.type, what);
    AQPIM_CHECK(W.rows >= 0 && W.cols >= 0, "{}: bad shape [{}, {}]", what, W.rows, W.cols);
    W.row_bytes();  // throws if cols is not a whole number of blocks
    AQPIM_CHECK(!W.empty() || W.rows == 0 || W.cols == 0, "{}: weight matrix has no data", what);
}

/// Rows per parallel chunk: one contiguous chunk per thread (each a sequential stream the hardware
/// prefetcher follows), and no threading below ~256 KB of weights where fork/join costs more.
int matvec_threads(const WeightMatrix& W, int n_threads) {
    const int nt = n_threads > 0 ? n_threads : default_threads();
    const std::size_t bytes = W.n_bytes();
    const std::int64_t by_size = std::int64_t(bytes / (std::size_t(256) << 10));
    return int(std::max<std::int64_t>(1, std::min<std::int64_t>({nt, by_size, W.rows})));
}

void matvec_prepared(const WeightMatrix& W, const float* x, const QuantizedX& qx, float* y, int nt) {
    const QuantKernels& k = dispatch(kTables);
    const std::size_t rb = W.row_bytes();
    if (nt <= 1) {
        k.dot_rows(W.type, W.data, rb, W.rows, W.cols, x, qx, y);
        return;
    }
    // Four chunks per thread, each still a long sequential stream for the prefetcher, so a thread
    // that loses its core to another process leaves most of its share to the others.
    const std::int64_t n_chunks = std::min<std::int64_t>(W.rows, 4 * std::int64_t(nt));
    const std::int64_t per = ceil_div(W.rows, n_chunks);
    parallel_for(
        n_chunks,
        [&](std::int64_t c) {
            const std::int64_t r0 = c * per, r1 = std::min(W.rows, r0 + per);
            if (r0 < r1) k.dot_rows(W.type, W.row(r0), rb, r1 - r0, W.cols, x, qx, y + r0);
        },
        nt);
}

}  // namespace quant

void matvec(const WeightMatrix& W, const float* x, float* y, int n_threads, Workspace* ws) {
    check_matrix(W, "matvec");
    if (W.rows == 0) return;
    if (W.cols == 0) {
        std::fill(y, y + W.rows, 0.0f);
        return;
    }
    Workspace own;
    QuantizedX& qx = workspace_or(ws, own).get<MatmulScratch>().qx;
    if (quantizes_x(W.type)) dispatch(kTables).prepare_x(W.type, x, W.cols, qx);
    matvec_prepared(W, x, qx, y, matvec_threads(W, n_threads));
}

}  // namespace aqpim
