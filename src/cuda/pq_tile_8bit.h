#pragma once
// How the 8-bit PQ attention kernel (pq_attention_8bit.cu) cuts its work, shared with its CPU
// emulation (tests/cuda/kernel_emulation_8bit.h). With 256 centroids a subspace's tables for a
// GQA group of 4 are 4 KiB, so the whole tables (128 KiB at M = 32) and value histograms do not
// fit in shared memory beside each other. The kernel takes a chunk's coded tokens in segments of
// pages of one codebook version and, per segment, the subspaces in groups whose tables (or
// histograms) take 32 KiB:
//
//   codes:   a group's code rows of a run of the segment's blocks staged in shared memory (8 KiB,
//            16-byte copies all in flight at once), then read from there
//   keys:    per group: tables [g][256][nq] built, every token's partial score += its g lookups
//   softmax: the segment's max per head, weights into the score buffer, the block's state rescaled
//   values:  per group: histograms [g][256][nq] (shared-memory atomics), then through the value
//            codebook into the segment's values y [nq][D] (quantizer space)
//   end:     y to the original space (perm and gain, or the rotation) into the block's accumulator

#include "cuda/attention_params.h"
#include "cuda/pq_tile.h"

namespace aqpim::cuda {

inline constexpr int kTable8Floats = 8192;  ///< a subspace group's tables / histograms [g][256][nq]: 32 KiB

inline constexpr int kStage8Bytes = 8192;  ///< code rows staged at once

/// Segment blocks whose rows of a group of g subspaces fit the stage at once.
AQPIM_HD constexpr int stage_blocks_8bit(int g) { return kStage8Bytes / (g * kBlockTokens); }  // g <= 32: >= 8

/// 16-byte chunk q of the staged rows m0 .. m0 + g - 1 of segment blocks j0, j0 + 1, ...: its byte
/// offset in the stage ([block - j0][m - m0][32]) and in the pool (seg: the blocks' pool offsets).
struct StageChunk {
    int dst;
    std::int64_t src;
};
AQPIM_HD StageChunk stage_chunk(const std::int64_t* seg, int j0, int m0, int g, int q) {
    const int half = q & 1, r = q >> 1;  // r = (j - j0) * g + (m - m0)
    return {r * kBlockTokens + half * 16, seg[j0 + r / g] + std::int64_t(m0 + r % g) * kBlockTokens + half * 16};
}
/// Code of token t (0..31) of staged block j - j0 in subspace m - m0.
AQPIM_HD int staged_code(const std::uint8_t* stage, int j_rel, int g, int m_rel, int t) {
    return stage[(j_rel * g + m_rel) * kBlockTokens + t];
}

/// Floats of a segment's scores / weights [tokens][nq]: 16 KiB, 32 KiB for groups of 8 heads, whose
/// instance holds 2 blocks per SM by its registers anyway (255: docs/cuda.md), so their segments
/// stay 1024 tokens long and the per-segment table builds cost half as much per token.
AQPIM_HD constexpr int segment_floats_8bit(int nq) { return nq >= 8 ? 8192 : 4096; }
/// Coded tokens of one segment (whole 32-token blocks) for a group instance of nq heads.
AQPIM_HD constexpr int segment_tokens_8bit(int nq) { return segment_floats_8bit(nq) / nq; }
/// Subspaces per group of tables / histograms.
AQPIM_HD constexpr int group_subspaces_8bit(int nq) { return kTable8Floats / (kKsub8 * nq); }

/// Element i of the GQA group's queries qy [nq][D] (q [n_q][D]) in the key codebook's space, zeros
/// past n_q.
AQPIM_HD float group_query_element(const PqAttentionParams& p, const float* q, const PqCodebookView& kcb, int i) {
    const int D = p.shape.D;
    return i / D < p.shape.n_q ? query_in_quantizer_space(q + (i / D) * D, kcb, p.shape.scale, i % D) : 0.0f;
}

/// The next segment of (b, kv)'s chunk ending at page page_end: from block blk of page pg, the
/// blocks of the pages of version cur, at most max_blocks. Calls on_block(j, key block offset, value
/// block offset, valid tokens) for the segment's blocks j = first, first + stride, ... (the kernel's
/// threads share them out), moves pg and blk past the segment and returns its block count.
template <class OnBlock>
AQPIM_HD int next_segment(const PqAttentionParams& p, int b, int kv, int page_end, int cur, int max_blocks, int first,
                          int stride, int& pg, int& blk, const OnBlock& on_block) {
    const int kbb = stream_block_bytes(p, false), vbb = stream_block_bytes(p, true);
    const int n_coded = p.n_coded[b];
    int n_blocks = 0;
    while (pg < page_end && n_blocks < max_blocks) {
        const std::int64_t pt = std::int64_t(b) * p.max_pages + pg;
        if (p.page_version[pt] != cur) break;
        const int page_tok = n_coded - pg * p.page_tokens < p.page_tokens ? n_coded - pg * p.page_tokens : p.page_tokens;
        const int page_blocks = (page_tok + kBlockTokens - 1) / kBlockTokens;
        const int take = page_blocks - blk < max_blocks - n_blocks ? page_blocks - blk : max_blocks - n_blocks;
        const std::int64_t page = p.page_offset[pt];
        for (int j = first; j < take; j += stride) {
            const int valid = page_tok - (blk + j) * kBlockTokens;
            on_block(n_blocks + j, page + p.k_stream_off[kv] + std::int64_t(blk + j) * kbb,
                     page + p.v_stream_off[kv] + std::int64_t(blk + j) * vbb, valid < kBlockTokens ? valid : kBlockTokens);
        }
        n_blocks += take;
        blk += take;
        if (blk == page_blocks) {
            ++pg;
            blk = 0;
        }
    }
    return n_blocks;
}

/// Dim i (quantizer space) of Σ_c hist[m - m0][c] C[m][c] for head h, hist [g][256][nq] holding
/// subspaces m0 .. m0 + g - 1 (m = i / dsub). Eight partial sums: the centroids come from L2, and
/// eight independent loads per step keep 32 round trips in a row instead of 256.
AQPIM_HD float hist8_times_centroids(const float* hist, int nq, int h, int m0, const float* cb, int dsub, int i) {
    constexpr int kWays = 8;
    const int m = i / dsub, d = i - m * dsub;
    const float* row = hist + std::int64_t(m - m0) * kKsub8 * nq + h;
    const float* cm = cb + std::int64_t(m) * kKsub8 * dsub + d;
    float s[kWays] = {};
    for (int c = 0; c < kKsub8; c += kWays) {
        AQPIM_UNROLL
        for (int k = 0; k < kWays; ++k) s[k] += row[(c + k) * nq] * cm[(c + k) * dsub];
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
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
