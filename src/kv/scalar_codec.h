#pragma once
// Scalar codes of the baseline KV caches: asymmetric b-bit groups with f16 scale and min (the int and
// KIVI schemes), and the row codec a row-quantized cache is parameterised by (one head row of a token
// -> a fixed number of bytes: int groups, or llama.cpp's Q8_0 / Q4_0 blocks).

#include <cstddef>
#include <cstdint>
#include <string>

#include "aqpim/ggml_types.h"
#include "aqpim/half.h"

namespace aqpim::kv {

// ---- asymmetric groups ---------------------------------------------------------------------------

/// n_groups groups of g values with `bits`-bit codes; element i of group j is
/// x[j * group_stride + i * elem_stride]. A row split in groups is {hd / g, g, bits, g, 1}; KIVI's
/// per-channel key block of g tokens [g][hd] is {hd, g, bits, 1, hd}.
struct AffineLayout {
    int n_groups = 0;
    int g = 0;
    int bits = 0;
    std::int64_t group_stride = 0;
    std::int64_t elem_stride = 0;

    std::size_t scale_bytes() const { return std::size_t(n_groups) * sizeof(f16_t); }
    std::size_t min_bytes() const { return std::size_t(n_groups) * sizeof(f16_t); }
    std::size_t code_bytes() const { return (std::size_t(n_groups) * g * bits + 7) / 8; }
    /// Encoded bytes: [n_groups] f16 scales, [n_groups] f16 mins, codes (a little-endian bitstream,
    /// group-major: code i of group j at bits (j * g + i) * bits ..).
    std::size_t bytes() const { return scale_bytes() + min_bytes() + code_bytes(); }
};

/// Quantize one group: x[i * stride], i < n -> q[i] in [0, 2^bits - 1] with x ~ min + scale * q.
/// min is rounded down to f16 and scale up, so every |x - (min + scale * q)| <= scale / 2 (up to f32
/// rounding) and no code clips. Non-finite input gives unspecified codes. q null: scale and min only.
void quantize_affine_group(const float* x, std::int64_t stride, int n, int bits, f16_t& scale, f16_t& min,
                           std::uint8_t* q);

/// Encode / decode n_groups groups as laid out by `layout` (out: `layout.bytes()` bytes).
void affine_encode(const AffineLayout& layout, const float* x, std::uint8_t* out);
void affine_decode(const AffineLayout& layout, const std::uint8_t* in, float* x);

/// Little-endian bitstreams of n codes of `bits` bits (1..8): (n * bits + 7) / 8 bytes.
void pack_bits(const std::uint8_t* q, std::int64_t n, int bits, std::uint8_t* out);
void unpack_bits(const std::uint8_t* in, std::int64_t n, int bits, std::uint8_t* q);

// ---- row codecs ---------------------------------------------------------------------------------

/// How one head row of `head_dim` values is coded into `row_bytes()` bytes.
struct RowCodec {
    enum class Kind { affine, ggml };
    Kind kind = Kind::affine;
    int head_dim = 0;
    AffineLayout affine;            ///< Kind::affine: {head_dim / g, g, bits, g, 1}
    GgmlType type = GgmlType::Q8_0; ///< Kind::ggml: Q8_0 or Q4_0, head_dim / 32 blocks in llama.cpp's layout

    /// Per-token group-wise asymmetric codes (1 <= bits <= 8, g divides head_dim, else aqpim::Error).
    static RowCodec affine_groups(int head_dim, int bits, int g);
    /// llama.cpp blocks (Q8_0 / Q4_0; head_dim a multiple of 32, else aqpim::Error).
    static RowCodec ggml_blocks(int head_dim, GgmlType type);

    /// Bytes of one row by part: codes, f16 scales, f16 mins (0 for ggml blocks).
    std::size_t code_bytes() const;
    std::size_t scale_bytes() const;
    std::size_t min_bytes() const;
    std::size_t row_bytes() const { return code_bytes() + scale_bytes() + min_bytes(); }

    /// x [n][head_dim] (row stride x_stride floats) -> rows [n][row_bytes()].
    void encode(const float* x, std::int64_t n, std::int64_t x_stride, std::uint8_t* rows) const;
    /// rows [n][row_bytes()] -> out [n][head_dim].
    void decode(const std::uint8_t* rows, std::int64_t n, float* out) const;
};

}  // namespace aqpim::kv
