#pragma once
// Per-thread arithmetic of the CUDA PQ kernels (encode, attention, decompress), shared with the
// CPU tests. Layouts are the CPU's (aqpim/pq_codes.h, docs/pq-kernels.md): tokens in blocks of 32;
// a 4-bit block is ceil(M/4) groups of 16 dwords, dword i of group g packing, for subspace 4g+j,
// token i in bits [8j, 8j+4) and token i+16 in bits [8j+4, 8j+8); an 8-bit block is M rows of 32
// bytes, byte t of row m the code of token t in subspace m.
//
// Codebook versions are read in the quantizer's space (aqpim/pq.h): with P the permutation, s the
// scale (gain, ones when scale folding is off) and R an optional rotation (D x D, row-major),
//   key/query:  y = P R (x / s),   qy = P R (s ∘ q)      y[i] = (R (x / s))[perm[i]]
//   values:     x = s ∘ (Rᵀ Pᵀ y)                       x[d] = s[d] Σ_i R[perm[i]][d] y[i]
// Without R: y[i] = x[perm[i]] / s[perm[i]], qy[i] = q[perm[i]] s[perm[i]], x[perm[i]] = s[perm[i]] y[i],
// so values need only a scatter through perm; with R, a D x D product per query and per flush.
// Scores need LUT[h][m][c] = qy_h[m] · C[m][c] either way.

#include <cstdint>

#include "cuda/hd.h"

namespace aqpim::cuda {

inline constexpr int kBlockTokens = 32;
inline constexpr int kKsub = 16;             ///< centroids per subspace of 4-bit codes
inline constexpr int kKsub8 = 256;           ///< of 8-bit codes
inline constexpr int kMaxDsub8 = 16;         ///< 8-bit codebooks need D / M <= 16 (the encode's subvector)
inline constexpr int kGroupDwords = 16;      ///< dwords of one 4-subspace group in a block
inline constexpr int kStageGroupDwords = 17;  ///< the same group in shared memory, padded by one dword
                                              ///< so the 8 groups a warp reads at once hit 8 banks

/// One codebook version of one KV head, as the kernels read it.
struct PqCodebookView {
    const float* cb = nullptr;           ///< [M][16][dsub] centroids in quantizer space
    const std::int32_t* perm = nullptr;  ///< [D] y[i] = x[perm[i]] / gain[perm[i]] (no rotation)
    const float* gain = nullptr;         ///< [D] per-channel scale s (ones when off)
    const float* rot = nullptr;          ///< [D][D] rotation R, row-major; null when none
    int D = 0;                           ///< head_dim (read with rot)
    int ksub = kKsub;                    ///< centroids per subspace: 16 (4-bit) or 256 (8-bit)
};

/// Centroids per subspace of nbits-bit codes (4 or 8).
AQPIM_HD int ksub_of(int nbits) { return 1 << nbits; }

/// Dwords of one 4-bit block: ceil(M/4) groups of 16.
AQPIM_HD int block_dwords(int M) { return (M + 3) / 4 * kGroupDwords; }
/// Bytes of one 4-bit block.
AQPIM_HD int block_bytes(int M) { return block_dwords(M) * 4; }
/// Bytes of one block of nbits-bit codes (4: packed groups; 8: M rows of 32 bytes).
AQPIM_HD int coded_block_bytes(int M, int nbits) { return nbits == 8 ? M * kBlockTokens : block_bytes(M); }

/// Sub-code m of token t (0..31) of a block whose groups are `group_stride` dwords apart
/// (kGroupDwords in memory, kStageGroupDwords when staged in shared memory).
AQPIM_HD int code4(const std::uint32_t* block, int group_stride, int t, int m) {
    const std::uint32_t dw = block[(m >> 2) * group_stride + (t & 15)];
    return int((dw >> (8 * (m & 3) + ((t >> 4) << 2))) & 15u);
}

/// Sub-code m of token t (0..31) of an 8-bit block.
AQPIM_HD int code8(const std::uint8_t* block, int t, int m) { return block[m * kBlockTokens + t]; }

/// Sub-code m of token t of a block in memory, either width.
AQPIM_HD int block_code(const std::uint8_t* block, int nbits, int t, int m) {
    return nbits == 8 ? code8(block, t, m) : code4(reinterpret_cast<const std::uint32_t*>(block), kGroupDwords, t, m);
}

/// Where sub-code m of token t goes: dword index in the block (memory layout) and bit shift.
AQPIM_HD int code4_dword(int t, int m) { return (m >> 2) * kGroupDwords + (t & 15); }
AQPIM_HD int code4_shift(int t, int m) { return 8 * (m & 3) + ((t >> 4) << 2); }

/// Index in the staged (padded) copy of a block's dword i.
AQPIM_HD int staged_dword(int i) { return i + i / kGroupDwords; }

// ---- queries and scores ------------------------------------------------------------------------

/// Element i of the query in quantizer space, softmax scale folded in.
AQPIM_HD float query_in_quantizer_space(const float* q, const PqCodebookView& k, float scale, int i) {
    const int p = k.perm[i];
    if (!k.rot) return q[p] * k.gain[p] * scale;
    const float* row = k.rot + std::int64_t(p) * k.D;
    float s = 0.0f;
    for (int j = 0; j < k.D; ++j) s += row[j] * (q[j] * k.gain[j]);
    return s * scale;
}

/// Element i of y = P R (x / s): the key or value x in quantizer space.
AQPIM_HD float to_quantizer_space(const float* x, const PqCodebookView& k, int i) {
    const int p = k.perm[i];
    if (!k.rot) return x[p] / k.gain[p];
    const float* row = k.rot + std::int64_t(p) * k.D;
    float s = 0.0f;
    for (int j = 0; j < k.D; ++j) s += row[j] * (x[j] / k.gain[j]);
    return s;
}

/// Original-space dim d of x = s ∘ (Rᵀ Pᵀ y) for a rotated codebook, y [D] in quantizer space.
AQPIM_HD float rotated_back(const PqCodebookView& v, const float* y, int d) {
    float s = 0.0f;
    for (int i = 0; i < v.D; ++i) s += v.rot[std::int64_t(v.perm[i]) * v.D + d] * y[i];
    return v.gain[d] * s;
}

/// LUT[m][c] = qy[m*dsub : (m+1)*dsub] · C[m][c], C with ksub centroids per subspace.
AQPIM_HD float lut_entry(const float* qy, const float* cb, int dsub, int m, int c, int ksub = kKsub) {
    const float* qm = qy + m * dsub;
    const float* cm = cb + (m * ksub + c) * dsub;
    float s = 0.0f;
    for (int d = 0; d < dsub; ++d) s += qm[d] * cm[d];
    return s;
}

/// score(t) = Σ_m LUT[m][code(t, m)] for one head's tables lut [M][16].
AQPIM_HD float token_score(const float* lut, const std::uint32_t* block, int group_stride, int t, int M) {
    float even = 0.0f, odd = 0.0f;  // two chains, as the CPU scan
    int m = 0;
    for (; m + 1 < M; m += 2) {
        even += lut[m * kKsub + code4(block, group_stride, t, m)];
        odd += lut[(m + 1) * kKsub + code4(block, group_stride, t, m + 1)];
    }
    if (m < M) even += lut[m * kKsub + code4(block, group_stride, t, m)];
    return even + odd;
}

// ---- online softmax --------------------------------------------------------------------------------

/// Factor that moves sums taken relative to max m_old to max m_new >= m_old (0 when nothing was seen).
AQPIM_HD float rescale(float m_old, float m_new) { return m_old == kNegInf ? 0.0f : hd_exp(m_old - m_new); }

/// Merge partial (m2, l2) into (m, l); returns the factors for the first and second accumulators.
struct MergeFactors {
    float a, b;
};
AQPIM_HD MergeFactors merge_stats(float& m, float& l, float m2, float l2) {
    const float mn = hd_max(m, m2);
    if (mn == kNegInf) return {1.0f, 0.0f};
    const MergeFactors f{rescale(m, mn), rescale(m2, mn)};
    l = l * f.a + l2 * f.b;
    m = mn;
    return f;
}

/// Partials the combine loads before it merges them (combine_element).
inline constexpr int kCombineBatch = 8;

/// Element d of head h of one (sequence, KV head): its n_parts partials (max, sum) part_ml[slot][2]
/// and acc part_acc[slot][D], slot = (base + c) * n_q + h, merged in order and normalised. The
/// partials are loaded kCombineBatch at a time before any is merged: their loads do not wait on
/// each other, so the merge costs one memory round trip per batch, not one per partial (128
/// partials x ~0.4 us of L2 latency is ~50 us: the batch-1 floor measured on the H200).
AQPIM_HD float combine_element(const float* part_ml, const float* part_acc, int n_q, int D, int n_parts,
                               std::int64_t base, int h, int d) {
    float m = kNegInf, l = 0.0f, a = 0.0f;
    for (int c0 = 0; c0 < n_parts; c0 += kCombineBatch) {
        float pm[kCombineBatch], pl[kCombineBatch], pa[kCombineBatch];
        AQPIM_UNROLL
        for (int i = 0; i < kCombineBatch; ++i) {
            const std::int64_t slot = (base + c0 + (c0 + i < n_parts ? i : 0)) * n_q + h;
            pm[i] = part_ml[slot * 2];
            pl[i] = part_ml[slot * 2 + 1];
            pa[i] = part_acc[slot * D + d];
        }
        AQPIM_UNROLL
        for (int i = 0; i < kCombineBatch; ++i)
            if (c0 + i < n_parts) {
                const MergeFactors f = merge_stats(m, l, pm[i], pl[i]);
                a = a * f.a + pa[i] * f.b;
            }
    }
    return l > 0.0f ? a / l : 0.0f;
}

// ---- values without decoding ---------------------------------------------------------------------------

/// Dim i (quantizer space) of Σ_c hist[c][m] C[m][c] for one head's histogram, bin (c, m) at
/// hist[(c * M + m) * stride] (bin-major, so the 32 lanes of a warp updating subspaces m..m+31 hit
/// distinct banks; stride = the heads interleaved per bin).
AQPIM_HD float hist_times_centroids(const float* hist, int M, int stride, const float* cb, int dsub, int i) {
    const int m = i / dsub, d = i - m * dsub;
    float s = 0.0f;
    for (int c = 0; c < kKsub; ++c) s += hist[(c * M + m) * stride] * cb[(m * kKsub + c) * dsub + d];
    return s;
}

/// Original-space dim of quantizer-space dim i and its gain: x[perm[i]] = gain[perm[i]] * y[i]
/// (codebooks without a rotation).
AQPIM_HD int value_dim(const PqCodebookView& v, int i) { return v.perm[i]; }
AQPIM_HD float value_gain(const PqCodebookView& v, int i) { return v.gain[v.perm[i]]; }

// ---- encode and decode -------------------------------------------------------------------------------

/// Nearest of the ksub centroids C[m][*] to the subvector m of y = forward(x) (ties: lowest
/// index), each distance summed over d in order, as ProductQuantizer::encode. 4-bit: the 16
/// distances in registers, d outer; 8-bit: the subvector in registers (dsub <= kMaxDsub8), c outer.
AQPIM_HD int nearest_code(const float* x, const PqCodebookView& k, int dsub, int m) {
    if (k.ksub == kKsub) {
        float dist[kKsub];
        for (int c = 0; c < kKsub; ++c) dist[c] = 0.0f;
        for (int d = 0; d < dsub; ++d) {
            const float yd = to_quantizer_space(x, k, m * dsub + d);
            for (int c = 0; c < kKsub; ++c) {
                const float e = yd - k.cb[(m * kKsub + c) * dsub + d];
                dist[c] += e * e;
            }
        }
        int best = 0;
        for (int c = 1; c < kKsub; ++c)
            if (dist[c] < dist[best]) best = c;
        return best;
    }
    float y[kMaxDsub8];
    for (int d = 0; d < dsub && d < kMaxDsub8; ++d) y[d] = to_quantizer_space(x, k, m * dsub + d);
    int best = 0;
    float best_dist = 0.0f;
    for (int c = 0; c < k.ksub; ++c) {
        const float* cm = k.cb + (std::int64_t(m) * k.ksub + c) * dsub;
        float dist = 0.0f;
        for (int d = 0; d < dsub && d < kMaxDsub8; ++d) {
            const float e = y[d] - cm[d];
            dist += e * e;
        }
        if (c == 0 || dist < best_dist) {
            best = c;
            best_dist = dist;
        }
    }
    return best;
}

/// Centroid value of quantizer-space dim i for a code: y[i] = C[m][code][i - m dsub].
AQPIM_HD float centroid_dim(const PqCodebookView& v, int dsub, int i, int code) {
    const int m = i / dsub;
    return v.cb[(m * v.ksub + code) * dsub + (i - m * dsub)];
}

/// Original-space value of dim perm[i] of a decoded vector: gain[perm[i]] * C[m][code][d]
/// (codebooks without a rotation).
AQPIM_HD float decoded_dim(const PqCodebookView& v, int dsub, int i, int code) {
    return value_gain(v, i) * centroid_dim(v, dsub, i, code);
}

}  // namespace aqpim::cuda
