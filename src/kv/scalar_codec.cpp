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

/// Little-endian bitstream of `bits`-bit codes (1..8), written one code at a time: pack_bits' layout.
class BitWriter {
public:
    BitWriter(std::uint8_t* out, int bits) : out_(out), bits_(bits) {}
    void put(std::uint32_t q) {
        acc_ |= q << n_acc_;
        n_acc_ += bits_;
        for (; n_acc_ >= 8; n_acc_ -= 8, acc_ >>= 8) *out_++ = std::uint8_t(acc_);
    }
    void finish() {
        if (n_acc_ > 0) *out_ = std::uint8_t(acc_);
    }

private:
    std::uint8_t* out_;
    int bits_;
    std::uint32_t acc_ = 0;
    int n_acc_ = 0;
};

/// The reader of a BitWriter's stream.
class BitReader {
public:
    BitReader(const std::uint8_t* in, int bits) : in_(in), bits_(bits), mask_((1u << bits) - 1) {}
    std::uint8_t get() {
        for (; n_acc_ < bits_; n_acc_ += 8) acc_ |= std::uint32_t(*in_++) << n_acc_;
        const std::uint8_t q = std::uint8_t(acc_ & mask_);
        acc_ >>= bits_;
        n_acc_ -= bits_;
        return q;
    }

private:
    const std::uint8_t* in_;
    int bits_;
    std::uint32_t mask_;
    std::uint32_t acc_ = 0;
    int n_acc_ = 0;
};

/// A group's f16 min (rounded down) and scale (rounded up), as quantize_affine_group documents.
void affine_range(const float* x, std::int64_t stride, int n, int top, f16_t& scale, f16_t& min) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i * stride]);
        hi = std::max(hi, x[i * stride]);
    }
    min = f16_round_down(lo);
    scale = f16_round_up((hi - h2f(min)) / float(top));
}

std::uint8_t affine_code(float x, float s, float mn, int top) {
    return s > 0 ? std::uint8_t(std::clamp(int(std::nearbyint((x - mn) / s)), 0, top)) : 0;
}

}  // namespace

// ---- asymmetric groups ---------------------------------------------------------------------------

void quantize_affine_group(const float* x, std::int64_t stride, int n, int bits, f16_t& scale, f16_t& min,
                           std::uint8_t* q) {
    AQPIM_ASSERT(n >= 1 && bits >= 1 && bits <= 8);
    const int top = (1 << bits) - 1;
    affine_range(x, stride, n, top, scale, min);
    const float s = h2f(scale), mn = h2f(min);
    for (int i = 0; i < n; ++i) q[i] = affine_code(x[i * stride], s, mn, top);
}

void pack_bits(const std::uint8_t* q, std::int64_t n, int bits, std::uint8_t* out) {
    if (bits == 8) {
        std::memcpy(out, q, std::size_t(n));
        return;
    }
    BitWriter w(out, bits);
    for (std::int64_t i = 0; i < n; ++i) w.put(q[i]);
    w.finish();
}

void unpack_bits(const std::uint8_t* in, std::int64_t n, int bits, std::uint8_t* q) {
    if (bits == 8) {
        std::memcpy(q, in, std::size_t(n));
        return;
    }
    BitReader r(in, bits);
    for (std::int64_t i = 0; i < n; ++i) q[i] = r.get();
}

// Groups are coded straight into the bitstream (codes group-major, as pack_bits lays them out), so
// no buffer of codes is needed between the groups and the stream.
void affine_encode(const AffineLayout& L, const float* x, std::uint8_t* out) {
    AQPIM_ASSERT(L.g >= 1 && L.bits >= 1 && L.bits <= 8);
    const int top = (1 << L.bits) - 1;
    BitWriter w(out + L.scale_bytes() + L.min_bytes(), L.bits);
    for (int j = 0; j < L.n_groups; ++j) {
        const float* xj = x + j * L.group_stride;
        f16_t scale, min;
        affine_range(xj, L.elem_stride, L.g, top, scale, min);
        std::memcpy(out + j * sizeof(f16_t), &scale, sizeof(f16_t));
        std::memcpy(out + L.scale_bytes() + j * sizeof(f16_t), &min, sizeof(f16_t));
        const float s = h2f(scale), mn = h2f(min);
        for (int i = 0; i < L.g; ++i) w.put(affine_code(xj[i * L.elem_stride], s, mn, top));
    }
    w.finish();
}

void affine_decode(const AffineLayout& L, const std::uint8_t* in, float* x) {
    BitReader r(in + L.scale_bytes() + L.min_bytes(), L.bits);
    for (int j = 0; j < L.n_groups; ++j) {
        f16_t scale, min;
        std::memcpy(&scale, in + j * sizeof(f16_t), sizeof(f16_t));
        std::memcpy(&min, in + L.scale_bytes() + j * sizeof(f16_t), sizeof(f16_t));
        const float s = h2f(scale), mn = h2f(min);
        float* xj = x + j * L.group_stride;
        for (int i = 0; i < L.g; ++i) xj[i * L.elem_stride] = mn + s * float(r.get());
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
