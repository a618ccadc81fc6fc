#pragma once
// The centroids of one quantizer as a PQ KV cache keeps them with cb=f16 or cb=int8 (the quantizer
// itself then holds none): rounded once when trained, widened to f32 for every use.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/half.h"
#include "aqpim/kv_pq.h"

namespace aqpim::kv {

struct CompactCentroids {
    CodebookStorage storage = CodebookStorage::f32;  ///< f16 or int8 once made
    int M = 0, ksub = 0, dsub = 0;                   ///< the layout [M][ksub][dsub]
    AlignedBuffer<f16_t> f16;                        ///< cb=f16: the centroids
    AlignedBuffer<std::int8_t> i8;                   ///< cb=int8: round(c / scale[dimension of c])
    /// cb=int8: per dimension of the quantized space, m * dsub + j: max |c| over its ksub centroids
    /// / 127 (0 where every centroid is 0).
    std::vector<float> scale;

    /// Round `centroids` [M][ksub][dsub] to `storage` (f16 or int8).
    static CompactCentroids round(CodebookStorage storage, const float* centroids, int M, int ksub, int dsub);
    std::size_t n_values() const { return std::size_t(M) * ksub * dsub; }
    /// Bytes held: 2 per value (f16), or 1 per value and 4 per dimension (int8).
    std::size_t bytes() const;
    /// The centroids widened to f32 into out [M][ksub][dsub] (resized).
    void widen(std::vector<float>& out) const;
};

/// out[m][i] = float(q[m][i]) * scale[m][i % dsub] for M subspaces of `per_m` values each (a
/// multiple of 16) with dsub dividing 16, per ISA (one product each: every level gives the same
/// bits). widen() runs it on every int8 codebook a decode call reads.
void widen_int8_by16_avx2(const std::int8_t* q, const float* scale, int M, std::size_t per_m, int dsub, float* out);
void widen_int8_by16_avx512(const std::int8_t* q, const float* scale, int M, std::size_t per_m, int dsub, float* out);

/// Bytes of the centroids of a quantizer with `ksub` centroids of D dimensions stored as `storage`.
std::size_t centroid_bytes(CodebookStorage storage, std::size_t ksub, std::size_t D);

}  // namespace aqpim::kv
