#pragma once
// The 8-bit PQ attention kernel's decomposition (src/cuda/pq_attention_8bit.cu) run on the CPU
// with its __host__ __device__ arithmetic (pq_tile.h, pq_tile_8bit.h): segments of at most
// segment_tokens_8bit(nq) tokens of one codebook version, subspace groups of
// group_subspaces_8bit(nq) for the tables and the histograms, code rows read through the same
// staging (runs of stage_blocks_8bit(g) blocks), one softmax rescale per segment, values through y
// in quantizer space. Plug into emulation::pq_attention as its coded chunk.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/attention_params.h"
#include "cuda/pq_tile_8bit.h"
#include "cuda/kernel_emulation.h"

namespace aqpim::cuda::emulation {

/// One segment: pool offsets of its key and value blocks, and their valid tokens.
struct Segment8 {
    std::vector<std::int64_t> k, v;
    std::vector<int> n;
};

/// Attend one segment of version `cur` into st (block-level online softmax, as the kernel).
inline void pq8_segment(const PqAttentionParams& p, const Segment8& seg, const PqCodebookView& kcb,
                        const PqCodebookView& vcb, const std::vector<float>& qy, int nq, Block& st) {
    const int D = p.shape.D, G = group_subspaces_8bit(nq), dk = D / p.Mk, dv = D / p.Mv;
    const int n_tok = int(seg.k.size()) * kBlockTokens;
    std::vector<float> w(std::size_t(n_tok) * nq, 0.0f), table(kTable8Floats), y(std::size_t(nq) * D);
    const auto valid = [&](int t) { return t % kBlockTokens < seg.n[t / kBlockTokens]; };
    // fn(token, m - m0, code) for every token of the segment and subspace m0 .. m0 + g - 1, the codes
    // read through the stage as the kernel stages them (stage_rows): runs of blocks, in order.
    std::vector<std::uint8_t> stage(kStage8Bytes);
    const int n_blocks = int(seg.k.size());
    const auto for_staged_codes = [&](const std::vector<std::int64_t>& blocks, int m0, int g, auto fn) {
        for (int j0 = 0; j0 < n_blocks; j0 += stage_blocks_8bit(g)) {
            const int j1 = std::min(n_blocks, j0 + stage_blocks_8bit(g));
            for (int q = 0; q < (j1 - j0) * g * 2; ++q) {
                const StageChunk c = stage_chunk(blocks.data(), j0, m0, g, q);
                std::copy_n(p.pool + c.src, 16, stage.begin() + c.dst);
            }
            for (int t = j0 * kBlockTokens; t < j1 * kBlockTokens; ++t)
                for (int m = 0; m < g; ++m) fn(t, m, staged_code(stage.data(), t / kBlockTokens - j0, g, m, t % kBlockTokens));
        }
    };
    for (int m0 = 0; m0 < p.Mk; m0 += G) {
        const int g = std::min(G, p.Mk - m0);
        for (int i = 0; i < g * kKsub8 * nq; ++i) {
            const int h = i % nq, r = i / nq;
            table[i] = lut_entry(qy.data() + h * D, kcb.cb, dk, m0 + r / kKsub8, r % kKsub8, kKsub8);
        }
        for_staged_codes(seg.k, m0, g, [&](int t, int m, int c) {
            for (int h = 0; h < nq; ++h) w[std::size_t(t) * nq + h] += table[(m * kKsub8 + c) * nq + h];
        });
    }
    for (int h = 0; h < nq; ++h) {
        float mx = kNegInf;
        for (int t = 0; t < n_tok; ++t)
            if (valid(t)) mx = std::max(mx, w[std::size_t(t) * nq + h]);
        const float mnew = std::max(st.m[h], mx), alpha = rescale(st.m[h], mnew);
        float sum = 0.0f;
        for (int t = 0; t < n_tok; ++t) {
            float& x = w[std::size_t(t) * nq + h];
            x = valid(t) ? hd_exp(x - mnew) : 0.0f;
            sum += x;
        }
        for (int d = 0; d < D; ++d) st.acc[h * D + d] *= alpha;
        st.l[h] = st.l[h] * alpha + sum;
        st.m[h] = mnew;
    }
    for (int m0 = 0; m0 < p.Mv; m0 += G) {
        const int g = std::min(G, p.Mv - m0);
        std::fill(table.begin(), table.end(), 0.0f);
        // Warp m % 4 adds subspace m's tokens block by block, a bin's lanes in lane order: per bin,
        // tokens in order (padding tokens weigh 0).
        for_staged_codes(seg.v, m0, g, [&](int t, int m, int c) {
            for (int h = 0; h < nq; ++h) table[(m * kKsub8 + c) * nq + h] += w[std::size_t(t) * nq + h];
        });
        for (int o = 0; o < nq * g * dv; ++o) {
            const int h = o % nq, i = m0 * dv + o / nq;
            y[h * D + i] = hist8_times_centroids(table.data(), nq, h, m0, vcb.cb, dv, i);
        }
    }
    for (int o = 0; o < nq * D; ++o) add_original_space(vcb, y.data() + (o / D) * D, o % D, st.acc.data() + (o / D) * D);
}

/// The 8-bit kernel's coded chunk `chunk` of (b, kv) into st.
inline void pq8_chunk(const PqAttentionParams& p, int b, int kv, int chunk, int nq, Block& st) {
    const int D = p.shape.D, seg_blocks = segment_tokens_8bit(nq) / kBlockTokens;
    const int n_coded = p.n_coded[b], n_pages = (n_coded + p.page_tokens - 1) / p.page_tokens;
    const int page_end = std::min((chunk + 1) * p.chunk_pages, n_pages);
    const float* q = p.q + (std::int64_t(b) * p.shape.n_kv_heads + kv) * p.shape.n_q * D;
    PqCodebookView kcb{}, vcb{};
    std::vector<float> qy(std::size_t(nq) * D);
    int cur = -1, pg = chunk * p.chunk_pages, blk = 0;
    while (pg < page_end) {
        const int ver = p.page_version[std::int64_t(b) * p.max_pages + pg];
        if (ver != cur) {
            cur = ver;
            kcb = codebook_view(p, codebook_slot(p, b, ver, kv), false);
            vcb = codebook_view(p, codebook_slot(p, b, ver, kv), true);
            for (int i = 0; i < nq * D; ++i) qy[i] = group_query_element(p, q, kcb, i);
        }
        Segment8 seg;
        next_segment(p, b, kv, page_end, cur, seg_blocks, 0, 1, pg, blk,
                     [&](int, std::int64_t k_off, std::int64_t v_off, int valid) {
                         seg.k.push_back(k_off);
                         seg.v.push_back(v_off);
                         seg.n.push_back(valid);
                     });
        pq8_segment(p, seg, kcb, vcb, qy, nq, st);
    }
}

}  // namespace aqpim::cuda::emulation
