#pragma once
// How the 8-bit PQ attention kernel (pq_attention_8bit.cu) cuts its work, shared with its CPU
// emulation (tests/cuda/kernel_emulation_8bit.h). With 256 centroids a subspace's tables for a
// GQA group of 4 are 4 KiB, so the whole tables (128 KiB at M = 32) and value histograms do not
// fit in shared memory beside each other. The kernel takes a chunk's coded tokens in segments of
// pages of one codebook version and, per segment, the subspaces in groups whose tables (or
// histograms) take 32 KiB:
//
//   keys:    per group: tables [g][256][nq] built, every token's partial score += its g lookups
//   softmax: the segment's max per head, weights into the score buffer, the block's state rescaled
//   values:  per group: histograms [g][256][nq] (shared-memory atomics), then through the value
//            codebook into the segment's values y [nq][D] (quantizer space)
//   end:     y to the original space (perm and gain, or the rotation) into the block's accumulator

#include "cuda/pq_tile.h"

namespace aqpim::cuda {

inline constexpr int kSeg8Floats = 4096;    ///< a segment's scores / weights [tokens][nq]: 16 KiB
inline constexpr int kTable8Floats = 8192;  ///< a subspace group's tables / histograms [g][256][nq]: 32 KiB

/// Coded tokens of one segment (whole 32-token blocks) for a group instance of nq heads.
AQPIM_HD constexpr int segment_tokens_8bit(int nq) { return kSeg8Floats / nq; }
/// Subspaces per group of tables / histograms.
AQPIM_HD constexpr int group_subspaces_8bit(int nq) { return kTable8Floats / (kKsub8 * nq); }

/// Dim i (quantizer space) of Σ_c hist[m - m0][c] C[m][c] for head h, hist [g][256][nq] holding
/// subspaces m0 .. m0 + g - 1 (m = i / dsub).
AQPIM_HD float hist8_times_centroids(const float* hist, int nq, int h, int m0, const float* cb, int dsub, int i) {
    const int m = i / dsub, d = i - m * dsub;
    const float* row = hist + std::int64_t(m - m0) * kKsub8 * nq + h;
    const float* cm = cb + std::int64_t(m) * kKsub8 * dsub + d;
    float s = 0.0f;
    for (int c = 0; c < kKsub8; ++c) s += row[c * nq] * cm[c * dsub];
    return s;
}

/// Add quantizer-space values y [D] of one head into acc [D] (original space):
/// acc[perm[i]] += gain[perm[i]] y[i], or acc[d] += (s ∘ Rᵀ Pᵀ y)[d] for a rotated codebook.
/// Element o (0 .. D-1) only: the kernel spreads them over threads.
AQPIM_HD void add_original_space(const PqCodebookView& v, const float* y, int o, float* acc) {
    if (v.rot)
        acc[o] += rotated_back(v, y, o);
    else
        acc[value_dim(v, o)] += value_gain(v, o) * y[o];
}

}  // namespace aqpim::cuda
