// Scalar codes of the baseline KV caches: asymmetric groups, bit packing, row codecs.

#include "kv/scalar_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/weights.h"

namespace aqpim::kv {

namespace {

float h2f(f16_t h) { return fp16_to_f32_scalar(h); }

/// The next f16 towards -inf / +inf (bit patterns; +-0 step to the smallest subnormal).
f16_t f16_step_down(f16_t h) {
    if (h == 0x0000) return 0x8001;
    return (h & 0x8000) ? f16_t(h + 1) : f16_t(h - 1);
}
f16_t f16_step_up(f16_t h) {
    if (h == 0x0000 || h == 0x8000) return 0x0001;
    return (h & 0x8000) ? f16_t(h - 1) : f16_t(h + 1);
}
/// Largest f16 <= x and smallest f16 >= x (x finite).
f16_t f16_round_down(float x) {
    const f16_t h = f32_to_fp16_scalar(x);
    return h2f(h) > x ? f16_step_down(h) : h;
}
f16_t f16_round_up(float x) {
    const f16_t h = f32_to_fp16_scalar(x);
    return h2f(h) < x ? f16_step_up(h) : h;
}

std::uint8_t affine_code(float x, float s, float mn, int top) {
    return s > 0 ? std::uint8_t(std::clamp(int(std::nearbyint((x - mn) / s)), 0, top)) : 0;
}

/// Codes are unpacked and packed in chunks of this many (a multiple of 8: every chunk starts on a byte).
constexpr std::int64_t kChunkCodes = 256;

/// The f16 scale and min of group j of a coded block, as floats.
void group_scale_min(const AffineLayout& L, const std::uint8_t* block, int j, float& s, float& mn) {
    f16_t scale, min;
    std::memcpy(&scale, block + j * sizeof(f16_t), sizeof(f16_t));
    std::memcpy(&min, block + L.scale_bytes() + j * sizeof(f16_t), sizeof(f16_t));
    s = h2f(scale);
    mn = h2f(min);
}

/// f(j, i0, cnt, at) for the codes [k0, k1) of a layout (flat index k = j * g + i), a group's run at a
/// time: group j's codes i0 .. i0 + cnt - 1, the first of them at k0 + at.
template <class F>
void for_codes(const AffineLayout& L, std::int64_t k0, std::int64_t k1, F f) {
    for (std::int64_t k = k0; k < k1;) {
        const int j = int(k / L.g);
        const std::int64_t end = std::min<std::int64_t>(k1, std::int64_t(j + 1) * L.g);
        f(j, int(k - std::int64_t(j) * L.g), int(end - k), k - k0);
        k = end;
    }
}

}  // namespace

// ---- asymmetric groups ---------------------------------------------------------------------------

void quantize_affine_group(const float* x, std::int64_t stride, int n, int bits, f16_t& scale, f16_t& min,
                           std::uint8_t* q) {
    AQPIM_ASSERT(n >= 1 && bits >= 1 && bits <= 8);
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i * stride]);
        hi = std::max(hi, x[i * stride]);
    }
    const int top = (1 << bits) - 1;
    min = f16_round_down(lo);
    const float mn = h2f(min);
    scale = f16_round_up((hi - mn) / float(top));
    if (!q) return;
    const float s = h2f(scale);
    for (int i = 0; i < n; ++i) q[i] = affine_code(x[i * stride], s, mn, top);
}

void pack_bits(const std::uint8_t* q, std::int64_t n, int bits, std::uint8_t* out) {
    if (bits == 8) {
        std::memcpy(out, q, std::size_t(n));
        return;
    }
    std::uint32_t acc = 0;
    int n_acc = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        acc |= std::uint32_t(q[i]) << n_acc;
        n_acc += bits;
        for (; n_acc >= 8; n_acc -= 8, acc >>= 8) *out++ = std::uint8_t(acc);
    }
    if (n_acc > 0) *out = std::uint8_t(acc);
}

void unpack_bits(const std::uint8_t* in, std::int64_t n, int bits, std::uint8_t* q) {
    if (bits == 8) {
        std::memcpy(q, in, std::size_t(n));
        return;
    }
    const std::uint32_t mask = (1u << bits) - 1;
    std::uint32_t acc = 0;
    int n_acc = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        for (; n_acc < bits; n_acc += 8) acc |= std::uint32_t(*in++) << n_acc;
        q[i] = std::uint8_t(acc & mask);
        acc >>= bits;
        n_acc -= bits;
    }
}

// The codes go through a chunk of kChunkCodes on the stack, group by group within it (codes are
// group-major in the stream), then are packed (or, decoding, unpacked then scaled: that loop is the
// one that vectorises).
void affine_encode(const AffineLayout& L, const float* x, std::uint8_t* out) {
    AQPIM_ASSERT(L.g >= 1 && L.bits >= 1 && L.bits <= 8);
    const std::int64_t n = std::int64_t(L.n_groups) * L.g;
    const int top = (1 << L.bits) - 1;
    std::uint8_t* codes = out + L.scale_bytes() + L.min_bytes();
    std::uint8_t q[kChunkCodes];
    for (int j = 0; j < L.n_groups; ++j) {
        f16_t scale, min;
        quantize_affine_group(x + j * L.group_stride, L.elem_stride, L.g, L.bits, scale, min, nullptr);
        std::memcpy(out + j * sizeof(f16_t), &scale, sizeof(f16_t));
        std::memcpy(out + L.scale_bytes() + j * sizeof(f16_t), &min, sizeof(f16_t));
    }
    for (std::int64_t k0 = 0; k0 < n; k0 += kChunkCodes) {
        const std::int64_t k1 = std::min(n, k0 + kChunkCodes);
        for_codes(L, k0, k1, [&](int j, int i0, int cnt, std::int64_t at) {
            float s, mn;
            group_scale_min(L, out, j, s, mn);
            const float* xj = x + j * L.group_stride + std::int64_t(i0) * L.elem_stride;
            for (int i = 0; i < cnt; ++i) q[at + i] = affine_code(xj[i * L.elem_stride], s, mn, top);
        });
        pack_bits(q, k1 - k0, L.bits, codes + k0 * L.bits / 8);
    }
}

void affine_decode(const AffineLayout& L, const std::uint8_t* in, float* x) {
    const std::int64_t n = std::int64_t(L.n_groups) * L.g;
    const std::uint8_t* codes = in + L.scale_bytes() + L.min_bytes();
    std::uint8_t q[kChunkCodes];
    for (std::int64_t k0 = 0; k0 < n; k0 += kChunkCodes) {
        const std::int64_t k1 = std::min(n, k0 + kChunkCodes);
        unpack_bits(codes + k0 * L.bits / 8, k1 - k0, L.bits, q);
        for_codes(L, k0, k1, [&](int j, int i0, int cnt, std::int64_t at) {
            float s, mn;
            group_scale_min(L, in, j, s, mn);
            float* xj = x + j * L.group_stride + std::int64_t(i0) * L.elem_stride;
            const std::uint8_t* qj = q + at;
            for (int i = 0; i < cnt; ++i) xj[i * L.elem_stride] = mn + s * float(qj[i]);
        });
    }
}

// ---- row codecs ---------------------------------------------------------------------------------

RowCodec RowCodec::affine_groups(int head_dim, int bits, int g) {
    AQPIM_CHECK(bits >= 1 && bits <= 8, "scalar KV codes: bits={} must be in 1..8", bits);
    AQPIM_CHECK(g >= 1, "scalar KV codes: group size g={} must be positive", g);
    AQPIM_CHECK(head_dim % g == 0, "scalar KV codes: group size g={} does not divide head_dim {}", g, head_dim);
    RowCodec c;
    c.kind = Kind::affine;
    c.head_dim = head_dim;
    c.affine = AffineLayout{head_dim / g, g, bits, g, 1};
    return c;
}

RowCodec RowCodec::ggml_blocks(int head_dim, GgmlType type) {
    AQPIM_CHECK(type == GgmlType::Q8_0 || type == GgmlType::Q4_0, "scalar KV codes: {} is not a KV block type",
                ggml_type_name(type));
    AQPIM_CHECK(head_dim % 32 == 0, "scalar KV codes: {} needs head_dim a multiple of 32 (blocks of 32), got {}",
                ggml_type_name(type), head_dim);
    RowCodec c;
    c.kind = Kind::ggml;
    c.head_dim = head_dim;
    c.type = type;
    return c;
}

std::size_t RowCodec::code_bytes() const {
    if (kind == Kind::affine) return affine.code_bytes();
    return type == GgmlType::Q8_0 ? std::size_t(head_dim) : std::size_t(head_dim) / 2;
}

std::size_t RowCodec::scale_bytes() const {
    return kind == Kind::affine ? affine.scale_bytes() : std::size_t(head_dim) / 32 * sizeof(f16_t);
}

std::size_t RowCodec::min_bytes() const { return kind == Kind::affine ? affine.min_bytes() : 0; }

void RowCodec::encode(const float* x, std::int64_t n, std::int64_t x_stride, std::uint8_t* rows) const {
    const std::size_t rb = row_bytes();
    for (std::int64_t r = 0; r < n; ++r) {
        if (kind == Kind::affine)
            affine_encode(affine, x + r * x_stride, rows + r * rb);
        else
            quantize(type, x + r * x_stride, rows + r * rb, head_dim);
    }
}

void RowCodec::decode(const std::uint8_t* rows, std::int64_t n, float* out) const {
    if (kind == Kind::ggml) {
        dequantize(type, rows, out, n * head_dim);  // rows of whole blocks are one run of blocks
        return;
    }
    const std::size_t rb = row_bytes();
    for (std::int64_t r = 0; r < n; ++r) affine_decode(affine, rows + r * rb, out + r * head_dim);
}

}  // namespace aqpim::kv
