#pragma once
// The CUDA attention kernels' decomposition run on the CPU with the same __host__ __device__
// arithmetic (src/cuda/pq_tile.h): chunks of pages per thread block, 32-token code blocks dealt to
// 4 warps in turn, per-warp online softmax and value histograms, flushes at codebook-version
// changes, the merge of the warps, the f16-row tiles, and the final reduction across chunks.
// What the GPU adds beyond this (shuffles, shared-memory staging, barriers) is covered by the
// device tests (test_cuda_device.cpp), which need a GPU.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/attention_params.h"
#include "cuda/host_problem.h"

namespace aqpim::cuda::emulation {

inline constexpr int kWarps = 4;

/// Online-softmax state of a thread block (BlockState of attention_common.cuh).
struct Block {
    int nq, D;
    std::vector<float> m, l, acc;     ///< [nq], [nq], [nq][D]
    std::vector<float> wm, wl, wacc;  ///< [4][nq], [4][nq], [4][nq][D]
    Block(int nq_, int D_)
        : nq(nq_), D(D_), m(nq, kNegInf), l(nq, 0.0f), acc(std::size_t(nq) * D, 0.0f), wm(kWarps * nq, kNegInf),
          wl(kWarps * nq, 0.0f), wacc(std::size_t(kWarps) * nq * D, 0.0f) {}
    void merge_warps() {  // block_merge_warps
        for (int h = 0; h < nq; ++h) {
            for (int d = 0; d < D; ++d) {
                float mm = m[h], ll = l[h], a = acc[h * D + d];
                for (int w = 0; w < kWarps; ++w) {
                    const MergeFactors f = merge_stats(mm, ll, wm[w * nq + h], wl[w * nq + h]);
                    a = a * f.a + wacc[(std::size_t(w) * nq + h) * D + d] * f.b;
                }
                acc[h * D + d] = a;
            }
            for (int w = 0; w < kWarps; ++w) merge_stats(m[h], l[h], wm[w * nq + h], wl[w * nq + h]);
        }
    }
};

/// attend_f16_rows: warp w takes tiles w, w + 4, ... of `tile` rows; per tile one max update.
inline void f16_rows(const std::vector<float>& qs /* [nq][D] scaled */, const std::uint16_t* K, const std::uint16_t* V,
                     std::int64_t r0, std::int64_t r1, int tile, Block& st) {
    const int nq = st.nq, D = st.D;
    for (int w = 0; w < kWarps; ++w) {
        std::vector<float> m(nq, kNegInf), l(nq, 0.0f), acc(std::size_t(nq) * D, 0.0f), s(tile);
        for (std::int64_t t0 = r0 + std::int64_t(w) * tile; t0 < r1; t0 += std::int64_t(kWarps) * tile)
            for (int h = 0; h < nq; ++h) {
                float mx = kNegInf;
                for (int u = 0; u < tile; ++u) {
                    s[u] = kNegInf;
                    if (t0 + u >= r1) continue;
                    float dot = 0.0f;
                    for (int d = 0; d < D; ++d) dot += qs[h * D + d] * hd_half_to_float(K[(t0 + u) * D + d]);
                    s[u] = dot;
                    mx = std::max(mx, dot);
                }
                const float mn = std::max(m[h], mx), alpha = rescale(m[h], mn);
                m[h] = mn;
                l[h] *= alpha;
                for (int d = 0; d < D; ++d) acc[h * D + d] *= alpha;
                for (int u = 0; u < tile && t0 + u < r1; ++u) {
                    const float p = hd_exp(s[u] - mn);
                    l[h] += p;
                    for (int d = 0; d < D; ++d) acc[h * D + d] += p * hd_half_to_float(V[(t0 + u) * D + d]);
                }
            }
        std::copy(m.begin(), m.end(), st.wm.begin() + w * nq);
        std::copy(l.begin(), l.end(), st.wl.begin() + w * nq);
        std::copy(acc.begin(), acc.end(), st.wacc.begin() + std::size_t(w) * nq * D);
    }
}

/// A codebook version's tables for the group (build_group_tables), one head after the other:
/// lut [nq][Mk][16] (zeros past n_q); returns the version's value codebook.
inline PqCodebookView version_tables(const PqAttentionParams& p, int b, int kv, int version, int nq,
                                     std::vector<float>& lut) {
    const int D = p.shape.D, Mk = p.Mk;
    const float* q = p.q + (std::int64_t(b) * p.shape.n_kv_heads + kv) * p.shape.n_q * D;
    const std::int64_t cs = codebook_slot(p, b, version, kv);
    const PqCodebookView kcb = codebook_view(p, cs, false);
    std::vector<float> qy(std::size_t(nq) * D);
    for (int i = 0; i < nq * D; ++i)
        qy[i] = i / D < p.shape.n_q ? query_in_quantizer_space(q + (i / D) * D, kcb, p.shape.scale, i % D) : 0.0f;
    lut.assign(std::size_t(nq) * Mk * kKsub, 0.0f);
    for (int i = 0; i < nq * Mk * kKsub; ++i) {
        const int r = i % (Mk * kKsub);
        lut[i] = lut_entry(qy.data() + (i / (Mk * kKsub)) * D, kcb.cb, D / Mk, r / kKsub, r % kKsub);
    }
    return codebook_view(p, cs, true);
}

/// The pages of chunk `chunk` of (b, kv) in order: on_version(v) when the codebook version changes
/// (before the page), then on_page(key blocks, value blocks, coded tokens of the page). Returns
/// whether the chunk had a page.
template <class OnVersion, class OnPage>
bool for_each_chunk_page(const PqAttentionParams& p, int b, int kv, int chunk, OnVersion on_version, OnPage on_page) {
    const int n_coded = p.n_coded[b], n_pages = (n_coded + p.page_tokens - 1) / p.page_tokens;
    int cur = -1;
    for (int pg = chunk * p.chunk_pages; pg < std::min((chunk + 1) * p.chunk_pages, n_pages); ++pg) {
        const std::int64_t pt = std::int64_t(b) * p.max_pages + pg;
        if (p.page_version[pt] != cur) on_version(cur = p.page_version[pt]);
        const std::uint8_t* page = p.pool + p.page_offset[pt];
        on_page(reinterpret_cast<const std::uint32_t*>(page + p.k_stream_off[kv]),
                reinterpret_cast<const std::uint32_t*>(page + p.v_stream_off[kv]),
                std::min(p.page_tokens, n_coded - pg * p.page_tokens));
    }
    return cur >= 0;
}

/// The PQ kernel's coded chunk `chunk` of (b, kv) into st (pq_attention.cu).
inline void pq_chunk(const PqAttentionParams& p, int b, int kv, int chunk, int nq, Block& st) {
    const int D = p.shape.D, Mk = p.Mk, Mv = p.Mv, kdw = block_dwords(Mk), vdw = block_dwords(Mv);
    std::vector<float> lut;
    std::vector<float> hist(std::size_t(kWarps) * nq * kKsub * Mv, 0.0f);
    std::vector<float> mw(kWarps * nq, kNegInf), lw(std::size_t(kWarps) * 32 * nq, 0.0f);  // lw per lane
    std::vector<std::uint32_t> sk(kdw + kdw / 16), sv(vdw + vdw / 16);
    PqCodebookView vcb{};
    int cur = -1;
    const auto flush = [&]() {
        for (int w = 0; w < kWarps; ++w) {
            float* hw = hist.data() + std::size_t(w) * nq * kKsub * Mv;
            for (int h = 0; h < nq; ++h) {
                float l = 0.0f;
                for (int lane = 0; lane < 32; ++lane) l += lw[(w * 32 + lane) * nq + h];
                st.wm[w * nq + h] = mw[w * nq + h];
                st.wl[w * nq + h] = l;
                float* wacc = st.wacc.data() + (std::size_t(w) * nq + h) * D;
                std::vector<float> yq(D);
                for (int y = 0; y < D; ++y) yq[y] = hist_times_centroids(hw + h * kKsub * Mv, Mv, 1, vcb.cb, D / Mv, y);
                for (int y = 0; y < D; ++y) {
                    if (vcb.rot)
                        wacc[y] = rotated_back(vcb, yq.data(), y);
                    else
                        wacc[value_dim(vcb, y)] = value_gain(vcb, y) * yq[y];
                }
            }
            std::fill(hw, hw + nq * kKsub * Mv, 0.0f);
        }
        std::fill(mw.begin(), mw.end(), kNegInf);
        std::fill(lw.begin(), lw.end(), 0.0f);
        st.merge_warps();
    };
    const bool any = for_each_chunk_page(p, b, kv, chunk, [&](int version) {
        if (cur >= 0) flush();
        cur = version;
        vcb = version_tables(p, b, kv, cur, nq, lut);
    }, [&](const std::uint32_t* kb, const std::uint32_t* vb, int n_tok) {
        for (int blk = 0; blk * kBlockTokens < n_tok; ++blk) {
            const int w = blk % kWarps, valid = std::min(kBlockTokens, n_tok - blk * kBlockTokens);
            for (int i = 0; i < kdw; ++i) sk[staged_dword(i)] = kb[std::int64_t(blk) * kdw + i];
            for (int i = 0; i < vdw; ++i) sv[staged_dword(i)] = vb[std::int64_t(blk) * vdw + i];
            float* hw = hist.data() + std::size_t(w) * nq * kKsub * Mv;
            std::vector<float> pr(32 * nq);
            for (int h = 0; h < nq; ++h) {
                float s[32], mx = kNegInf;
                for (int lane = 0; lane < 32; ++lane) {
                    s[lane] = lane < valid ? token_score(lut.data() + h * Mk * kKsub, sk.data(), kStageGroupDwords, lane, Mk)
                                           : kNegInf;
                    mx = std::max(mx, s[lane]);
                }
                float& m = mw[w * nq + h];
                const float mn = std::max(m, mx), alpha = rescale(m, mn);
                if (m != kNegInf && mn > m)
                    for (int i = 0; i < kKsub * Mv; ++i) hw[h * kKsub * Mv + i] *= alpha;
                m = mn;
                for (int lane = 0; lane < 32; ++lane) {
                    pr[lane * nq + h] = lane < valid ? hd_exp(s[lane] - mn) : 0.0f;
                    float& l = lw[(w * 32 + lane) * nq + h];
                    l = l * alpha + pr[lane * nq + h];
                }
            }
            for (int t = 0; t < valid; ++t)
                for (int mm = 0; mm < Mv; ++mm) {
                    const int c = code4(sv.data(), kStageGroupDwords, t, mm);
                    for (int h = 0; h < nq; ++h) hw[(h * kKsub + c) * Mv + mm] += pr[t * nq + h];
                }
        }
    });
    if (any) flush();
}

/// The emulation of one coded chunk of a PQ kernel: (params, b, kv, chunk, group instance, state).
using ChunkEmulation = void (*)(const PqAttentionParams&, int, int, int, int, Block&);

/// out [batch][n_kv_heads * n_q][D]: a PQ kernel (chunks + the f16 chunk) and the combine, emulated.
inline std::vector<float> pq_attention(const HostPqProblem& h, int f16_tile_rows, ChunkEmulation coded = pq_chunk) {
    const PqAttentionParams p = h.view();
    const int D = p.shape.D, n_q = p.shape.n_q, nq = group_instance(n_q);
    std::vector<float> out(std::size_t(p.shape.batch) * p.shape.n_kv_heads * n_q * D);
    for (int b = 0; b < p.shape.batch; ++b)
        for (int kv = 0; kv < p.shape.n_kv_heads; ++kv) {
            std::vector<Block> parts;
            for (int chunk = 0; chunk <= p.n_chunks; ++chunk) {
                Block st(nq, D);
                if (chunk == p.n_chunks) {
                    std::vector<float> qs(std::size_t(nq) * D, 0.0f);
                    const float* q = p.q + (std::int64_t(b) * p.shape.n_kv_heads + kv) * n_q * D;
                    for (int i = 0; i < n_q * D; ++i) qs[i] = q[i] * p.shape.scale;
                    const std::int64_t base = (std::int64_t(b) * p.shape.n_kv_heads + kv) * p.max_f16 * D;
                    f16_rows(qs, p.k16 + base, p.v16 + base, 0, p.n_f16[b], f16_tile_rows, st);
                    st.merge_warps();
                } else {
                    coded(p, b, kv, chunk, nq, st);
                }
                parts.push_back(std::move(st));
            }
            // write_partial of every chunk (heads < n_q), then combine_partials_kernel's arithmetic.
            const int n_parts = int(parts.size());
            std::vector<float> part_ml(std::size_t(n_parts) * n_q * 2), part_acc(std::size_t(n_parts) * n_q * D);
            for (int c = 0; c < n_parts; ++c)
                for (int hq = 0; hq < n_q; ++hq) {
                    part_ml[(std::size_t(c) * n_q + hq) * 2] = parts[c].m[hq];
                    part_ml[(std::size_t(c) * n_q + hq) * 2 + 1] = parts[c].l[hq];
                    std::copy_n(parts[c].acc.begin() + hq * D, D, part_acc.begin() + (std::size_t(c) * n_q + hq) * D);
                }
            for (int hq = 0; hq < n_q; ++hq)
                for (int d = 0; d < D; ++d)
                    out[((std::size_t(b) * p.shape.n_kv_heads + kv) * n_q + hq) * D + d] =
                        combine_element(part_ml.data(), part_acc.data(), n_q, D, n_parts, 0, hq, d);
        }
    return out;
}

}  // namespace aqpim::cuda::emulation
