// Scalar reference kernels: the specification of every format and product (see
// src/model/quant_blocks.h and docs/weights.md). Dequantization evaluates llama.cpp's expressions
// in the same order (no fused multiply-add), so results are bit-identical to ggml-quants.c.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "aqpim/error.h"
#include "model/quant_blocks.h"

namespace aqpim::quant {

namespace {

float h2f(f16_t h) { return fp16_to_f32_scalar(h); }

void dequantize_q8_0(const BlockQ8_0* b, float* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, y += QK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < QK; ++j) y[j] = float(b[i].qs[j]) * d;
    }
}

void dequantize_q4_0(const BlockQ4_0* b, float* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, y += QK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < QK / 2; ++j) {
            y[j] = float((b[i].qs[j] & 0xF) - 8) * d;
            y[j + QK / 2] = float((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_q4_k(const BlockQ4_K* b, float* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        std::uint8_t sc[8], m[8];
        unpack_q4k_scales(b[i].scales, sc, m);
        const std::uint8_t* q = b[i].qs;
        for (int c = 0; c < 4; ++c, q += 32) {
            const float d1 = d * float(sc[2 * c]), m1 = dmin * float(m[2 * c]);
            const float d2 = d * float(sc[2 * c + 1]), m2 = dmin * float(m[2 * c + 1]);
            for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
        }
    }
}

/// The 6-bit value (0..63) of Q6_K value i of a block.
int q6k_value(const BlockQ6_K& b, int i) {
    const int h = i / 128, r = i % 128, l = r % 32, quarter = r / 32;
    const std::uint8_t ql = b.ql[64 * h + l + (quarter & 1) * 32];
    const int lo = quarter < 2 ? (ql & 0xF) : (ql >> 4);
    const int hi = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
    return lo | (hi << 4);
}

void dequantize_q6_k(const BlockQ6_K* b, float* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, y += QK_K) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < QK_K; ++j) y[j] = d * float(b[i].scales[j / 16]) * float(q6k_value(b[i], j) - 32);
    }
}

// ---- integer row dots (x quantized per block of 32) ---------------------------------------------

float dot_q8_0(const BlockQ8_0* w, const QuantizedX& qx, std::int64_t nb) {
    float sum = 0;
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int8_t* xq = qx.q.data() + b * QK;
        int isum = 0;
        for (int j = 0; j < QK; ++j) isum += int(w[b].qs[j]) * int(xq[j]);
        sum += h2f(w[b].d) * qx.d[std::size_t(b)] * float(isum);
    }
    return sum;
}

float dot_q4_0(const BlockQ4_0* w, const QuantizedX& qx, std::int64_t nb) {
    float sum = 0;
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int8_t* xq = qx.q.data() + b * QK;
        int isum = 0;
        for (int j = 0; j < QK / 2; ++j)
            isum += ((w[b].qs[j] & 0xF) - 8) * int(xq[j]) + ((w[b].qs[j] >> 4) - 8) * int(xq[j + 16]);
        sum += h2f(w[b].d) * qx.d[std::size_t(b)] * float(isum);
    }
    return sum;
}

float dot_q4_k(const BlockQ4_K* w, const QuantizedX& qx, std::int64_t nb) {
    float sum = 0;
    for (std::int64_t i = 0; i < nb; ++i) {
        const float d = h2f(w[i].d), dmin = h2f(w[i].dmin);
        std::uint8_t sc[8], m[8];
        unpack_q4k_scales(w[i].scales, sc, m);
        for (int j = 0; j < 8; ++j) {
            const std::int64_t b = i * 8 + j;  // activation block = sub-block
            const std::int8_t* xq = qx.q.data() + b * QK;
            const std::uint8_t* q = w[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            int isum = 0;
            for (int l = 0; l < 32; ++l) isum += ((q[l] >> shift) & 0xF) * int(xq[l]);
            sum += qx.d[std::size_t(b)] *
                   (d * float(sc[j]) * float(isum) - dmin * float(m[j]) * float(qx.s[std::size_t(b)]));
        }
    }
    return sum;
}

float dot_q6_k(const BlockQ6_K* w, const QuantizedX& qx, std::int64_t nb) {
    float sum = 0;
    for (std::int64_t i = 0; i < nb; ++i) {
        const float d = h2f(w[i].d);
        for (int j = 0; j < 8; ++j) {
            const std::int64_t b = i * 8 + j;
            const std::int8_t* xq = qx.q.data() + b * QK;
            int isum = 0;
            for (int g = 0; g < 2; ++g) {
                int gsum = 0;
                for (int l = 0; l < 16; ++l) gsum += (q6k_value(w[i], 32 * j + 16 * g + l) - 32) * int(xq[16 * g + l]);
                isum += int(w[i].scales[2 * j + g]) * gsum;
            }
            sum += d * qx.d[std::size_t(b)] * float(isum);
        }
    }
    return sum;
}

}  // namespace

void reserve_x(QuantizedX& qx, std::int64_t n, bool lanes) {
    auto grow = [](auto& buf, std::int64_t size) {
        if (buf.size() < std::size_t(size)) buf.resize(std::size_t(size));
    };
    qx.n = n;
    grow(qx.q, n);
    grow(qx.d, n / QK);
    grow(qx.s, n / QK);
    grow(qx.s16, n / 16);
    if (lanes) {
        grow(qx.lane, n / 4);
        grow(qx.lane_i, n / 4);
        grow(qx.aux, n / 16);  // Q4_K: 16 per super-block; Q6_K: one per 16 values
    }
}

void quantize_x_ref(const float* x, std::int64_t n, QuantizedX& qx) {
    AQPIM_ASSERT(n % QK == 0);
    const std::int64_t nb = n / QK;
    reserve_x(qx, n, false);
    for (std::int64_t b = 0; b < nb; ++b) {
        const float* xb = x + b * QK;
        float amax = 0;
        for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        int s[2] = {0, 0};
        for (int j = 0; j < QK; ++j) {
            // |x * id| <= 127 for finite x; a non-finite activation (from non-finite weights, which
            // the forward pass reports) becomes -128, as the SIMD levels' conversion and saturating
            // packs make it, not a float-to-int conversion out of range (undefined behaviour).
            const float r = xb[j] * id;
            const int v = std::fabs(r) <= 128.0f ? int(std::nearbyint(r)) : -128;
            qx.q[std::size_t(b * QK + j)] = std::int8_t(v);
            s[j / 16] += v;
        }
        qx.d[std::size_t(b)] = d;
        qx.s[std::size_t(b)] = s[0] + s[1];
        qx.s16[std::size_t(2 * b)] = s[0];
        qx.s16[std::size_t(2 * b + 1)] = s[1];
    }
}

void dequantize_ref(GgmlType type, const void* src, float* dst, std::int64_t n) {
    switch (type) {
        case GgmlType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / QK);
        case GgmlType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / QK);
        case GgmlType::Q4_K: return dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / QK_K);
        case GgmlType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / QK_K);
        default: AQPIM_ASSERT(false);
    }
}

void prepare_x_ref(GgmlType, const float* x, std::int64_t n, QuantizedX& qx) { quantize_x_ref(x, n, qx); }

void dot_rows_ref(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows, std::int64_t cols,
                  const float* x, const QuantizedX& qx, float* y) {
    for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::uint8_t* row = w + std::size_t(r) * row_bytes;
        float sum = 0;
        switch (type) {
            case GgmlType::F32: {
                const float* v = reinterpret_cast<const float*>(row);
                for (std::int64_t i = 0; i < cols; ++i) sum += v[i] * x[i];
                break;
            }
            case GgmlType::F16: {
                const f16_t* v = reinterpret_cast<const f16_t*>(row);
                for (std::int64_t i = 0; i < cols; ++i) sum += fp16_to_f32_scalar(v[i]) * x[i];
                break;
            }
            case GgmlType::BF16: {
                const bf16_t* v = reinterpret_cast<const bf16_t*>(row);
                for (std::int64_t i = 0; i < cols; ++i) sum += bf16_to_f32_scalar(v[i]) * x[i];
                break;
            }
            case GgmlType::Q8_0: sum = dot_q8_0(reinterpret_cast<const BlockQ8_0*>(row), qx, cols / QK); break;
            case GgmlType::Q4_0: sum = dot_q4_0(reinterpret_cast<const BlockQ4_0*>(row), qx, cols / QK); break;
            case GgmlType::Q4_K: sum = dot_q4_k(reinterpret_cast<const BlockQ4_K*>(row), qx, cols / QK_K); break;
            case GgmlType::Q6_K: sum = dot_q6_k(reinterpret_cast<const BlockQ6_K*>(row), qx, cols / QK_K); break;
            default: AQPIM_ASSERT(false);
        }
        y[r] = sum;
    }
}

}  // namespace aqpim::quant
