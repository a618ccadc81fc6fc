#pragma once
// The vector code of the `turbo` and `qjl` KV caches: TurboQuant (Zandieh et al., arXiv 2504.19874)
// and its 1-bit QJL sketch (Zandieh et al., arXiv 2406.03482), for one stream (keys or values).
//
// A head row x [head_dim] is split over a channel permutation into at most two parts (the
// selected outlier channels first, then the rest), each coded independently:
//   TurboQuant_mse (mse_bits b > 0): y = R x_p / ‖x_p‖, R a random rotation of the part (randomized
//     Hadamard H·diag(±1)/√dim when dim is a power of two, else a random orthogonal matrix); each
//     coordinate of y to the nearest of the 2^b Lloyd-Max centroids c of the sphere-coordinate
//     density (turbo_lloyd_max.h). Stored: the b-bit indices and ‖x_p‖ as f16; decoded ĉ = ‖x_p‖ c[idx]
//     (with the f16 norm), in the rotated coordinates.
//   QJL sketch (sketch_bits m > 0): of the residual r = R x_p - ĉ (b > 0: TurboQuant_prod) or of x_p
//     itself (b = 0: QJL, no rotation): s = sign(S r), S [m][dim] i.i.d. N(0, 1). Stored: the m signs
//     and ‖r‖ as f16. For a query q' in the same coordinates, √(π/2)/m · ‖r‖ · <S q', s> is an
//     unbiased estimate of <q', r> over the draw of S (the papers' asymmetric estimator).
// Row layout, per part in order: [codes: ceil(b·dim/8) bytes, little-endian b-bit stream] [‖x_p‖ f16
// if b > 0] [signs: ceil(m/8) bytes, bit i = s_i > 0] [‖r‖ f16 if m > 0].
//
// Attention works in the parts' coordinates (turbo_attention.cpp): a key row decodes to an "extended
// row" [ĉ of every part with b > 0 | the m values ±√(π/2)/m·‖r‖ of every sketch], the query once per
// call to [R q_p | S q'], and their dot product is the estimated score. Value rows decode to ĉ; the
// softmax-weighted sum of those is rotated back once (unrotate).
//
// R and S are drawn from the seed (pq/rotation.h streams) and shared by every layer, head and
// sequence; the codebooks come from the density alone.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/turbo_lloyd_max.h"

namespace aqpim::kv {

/// One independently coded part of a head row.
struct TurboPartSpec {
    int dim = 0;          ///< channels of the part
    int mse_bits = 0;     ///< TurboQuant_mse bits per channel (0: none)
    int sketch_bits = 0;  ///< QJL signs m (0: none)
};

/// Bytes of one coded row by kind, for accounting.
struct TurboRowBytes {
    std::size_t codes = 0, norms = 0, signs = 0, sign_norms = 0;
    std::size_t total() const { return codes + norms + signs + sign_norms; }
};

class TurboStreamCoder {
public:
    /// parts cover head_dim channels in order; every part has dim >= 1, mse_bits in 0..8 (dim >= 2 when
    /// > 0) and sketch_bits >= 0, at least one of them > 0 (else aqpim::Error). `seed` draws R and S.
    TurboStreamCoder(int head_dim, std::vector<TurboPartSpec> parts, std::uint64_t seed);

    int head_dim() const { return head_dim_; }
    const std::vector<TurboPartSpec>& parts() const { return spec_; }
    /// Channels in the first part (the outlier channels when the row is split in two).
    int first_part_dim() const { return spec_[0].dim; }
    const TurboRowBytes& row_bytes() const { return row_bytes_; }
    /// Floats of an extended row: Σ dim over parts with mse_bits > 0, plus Σ sketch_bits.
    int ext_dim() const { return ext_dim_; }
    /// True when every coordinate of an extended row is a rotated channel (no sketch): value rows.
    bool rotated_only() const { return ext_dim_ == head_dim_ && sketch_dim_ == 0; }
    /// Bytes held for R, S and the codebooks (per coder, not per token).
    std::size_t rotation_bytes() const;
    std::size_t projection_bytes() const;
    std::size_t codebook_bytes() const;

    // `channels` [head_dim]: the permutation the parts take their channels from (part 0 first);
    // nullptr = identity.

    /// x [head_dim] -> one row of row_bytes().total() bytes.
    void encode(const float* x, const int* channels, std::uint8_t* row) const;
    /// rows [n][row bytes] -> ext [n][ext_dim()]: the extended rows attention reads.
    void decode_ext(const std::uint8_t* rows, std::int64_t n, float* ext) const;
    /// q [head_dim] -> q_ext [ext_dim()] with q_ext · decode_ext(row) = the row's estimated <q, x>.
    void prepare_query(const float* q, const int* channels, float* q_ext) const;
    /// acc [head_dim] in the rotated coordinates of a rotated_only() stream -> out [head_dim] original.
    void unrotate(const float* acc, const int* channels, float* out) const;
    /// The papers' DEQUANT: rows [n][row bytes] -> x̃ [n][head_dim] in the original coordinates
    /// (R^T (ĉ + √(π/2)/m ‖r‖ S^T s)); <q, x̃> equals q_ext · ext up to rounding.
    void decode(const std::uint8_t* rows, std::int64_t n, const int* channels, float* out) const;

private:
    struct Part {
        TurboPartSpec spec;
        int channel_offset = 0;   ///< first position in `channels`
        int mse_offset = -1;      ///< ĉ's position in an extended row (-1: no mse)
        int sketch_offset = -1;   ///< the sketch's position in an extended row (-1: none)
        std::size_t byte_offset = 0;
        std::size_t code_bytes = 0, sign_bytes = 0;
        const SphereCodebook* codebook = nullptr;  ///< mse_bits > 0
        std::vector<float> hadamard_signs;         ///< [dim] ±1 (mse, dim a power of two)
        std::vector<float> rotation;               ///< [dim][dim] row-major (mse, otherwise)
        std::vector<float> projection;             ///< S [sketch_bits][dim] row-major
        float sketch_scale = 0;                    ///< √(π/2) / m
    };
    /// y = R x (in place when x == y for Hadamard; out of place otherwise) and its transpose.
    void rotate(const Part& p, const float* x, float* y, bool transpose) const;

    int head_dim_ = 0;
    int ext_dim_ = 0;
    int sketch_dim_ = 0;
    std::vector<TurboPartSpec> spec_;
    std::vector<Part> parts_;
    TurboRowBytes row_bytes_;
};

}  // namespace aqpim::kv
