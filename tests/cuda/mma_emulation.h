#pragma once
// The tensor-core value path of the PQ kernel (src/cuda/pq_attention_mma.cu) run on the CPU: a
// warp's mma.sync.m16n8k16 emulated from the PTX ISA's fragment layouts, fed by the kernel's own
// per-lane functions (src/cuda/mma_tile.h), and the kernel's tiles of 4 code blocks with one
// running max shared by the warps, f16 weights and f32 accumulators.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/mma_tile.h"
#include "kernel_emulation.h"

namespace aqpim::cuda::emulation {

/// One warp's fragments: A [lane][4] f16x2, B [lane][2] f16x2, C [lane][4] f32.
struct WarpFragments {
    std::uint32_t a[32][4];
    std::uint32_t b[32][2];
};

inline float half_lo(std::uint32_t x) { return hd_half_to_float(std::uint16_t(x & 0xFFFFu)); }
inline float half_hi(std::uint32_t x) { return hd_half_to_float(std::uint16_t(x >> 16)); }

/// c += A * B as mma.sync.m16n8k16.row.col.f32.f16.f16.f32 computes it (PTX ISA, "Matrix Fragments
/// for mma.m16n8k16 with floating point type"): A 16 x 16, B 16 x 8, C 16 x 8.
inline void warp_mma(const WarpFragments& f, float (&c)[32][4]) {
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, q = lane & 3;
        for (int r = 0; r < 4; ++r) {
            const int row = g + 8 * (r & 1), col = 2 * q + 8 * (r >> 1);
            A[row][col] = half_lo(f.a[lane][r]);
            A[row][col + 1] = half_hi(f.a[lane][r]);
        }
        for (int r = 0; r < 2; ++r) {
            const int row = 2 * q + 8 * r;
            B[row][g] = half_lo(f.b[lane][r]);
            B[row + 1][g] = half_hi(f.b[lane][r]);
        }
        for (int e = 0; e < 4; ++e) C[g + 8 * (e >> 1)][2 * q + (e & 1)] = c[lane][e];
    }
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
            float s = C[i][j];
            for (int k = 0; k < 16; ++k) s += A[i][k] * B[k][j];
            C[i][j] = s;
        }
    for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) c[lane][e] = C[(lane >> 2) + 8 * (e >> 1)][2 * (lane & 3) + (e & 1)];
}

/// A block's weights p [32][nq] as the kernel writes them (f16 scaled by kWeightScale, weight_half_index).
inline std::vector<std::uint16_t> weight_fragments(const float* p, int nq) {
    std::vector<std::uint16_t> w(2 * kWeightBlockDwords, 0);
    for (int t = 0; t < 32; ++t)
        for (int h = 0; h < nq; ++h) w[weight_half_index(t, h)] = weight_to_half(p[t * nq + h]);
    return w;
}

/// H_m += OneHot_m^T * W for k-steps 0 and 1 of a staged value block: the kernel's inner loop for
/// subspace m, every lane of the warp. acc [32][4] per subspace.
inline void accumulate_block(const std::uint32_t* staged_v, const std::vector<std::uint16_t>& weights, int nq, int m,
                             float (&acc)[32][4]) {
    const auto* wd = reinterpret_cast<const std::uint32_t*>(weights.data());
    for (int ks = 0; ks < 2; ++ks) {
        WarpFragments f;
        for (int lane = 0; lane < 32; ++lane) {
            const int g = lane >> 2, q = lane & 3;
            onehot_fragment(staged_v, m, ks, g, q, f.a[lane]);
            const bool head = g < nq;
            f.b[lane][0] = head ? wd[weight_fragment_dword(ks, lane)] : 0u;
            f.b[lane][1] = head ? wd[weight_fragment_dword(ks, lane) + 1] : 0u;
        }
        warp_mma(f, acc);
    }
}

/// The MMA kernel's coded chunk `chunk` of (b, kv) into st.
inline void pq_chunk_mma(const PqAttentionParams& p, int b, int kv, int chunk, int nq, Block& st) {
    const int D = p.shape.D, Mk = p.Mk, Mv = p.Mv, kdw = block_dwords(Mk), vdw = block_dwords(Mv);
    std::vector<float> lut;  // [nq][Mk][16]
    std::vector<float> hist(std::size_t(kKsub) * Mv * nq);
    std::vector<float> m(nq, kNegInf), lw(std::size_t(kWarps) * 32 * nq, 0.0f);  // lw per (warp, lane)
    struct Accumulators {
        float v[32][4];
    };
    std::vector<Accumulators> acc(Mv);
    const auto zero_acc = [&] {
        for (auto& a : acc)
            for (auto& row : a.v) std::fill(row, row + 4, 0.0f);
    };
    zero_acc();
    PqCodebookView vcb{};
    int cur = -1;
    const auto flush = [&]() {
        for (int mm = 0; mm < Mv; ++mm)
            for (int lane = 0; lane < 32; ++lane)
                for (int e = 0; e < 4; ++e) {
                    const int h = acc_head(lane & 3, e);
                    if (h < nq) hist[(acc_code(lane >> 2, e) * Mv + mm) * nq + h] = acc[mm].v[lane][e] * kWeightUnscale;
                }
        zero_acc();
        for (int h = 0; h < nq; ++h) {
            float l_new = 0.0f;
            for (int i = 0; i < kWarps * 32; ++i) l_new += lw[i * nq + h];
            float mb = st.m[h], lb = st.l[h];
            const MergeFactors f = merge_stats(mb, lb, m[h], l_new);
            std::vector<float> yq(D);
            for (int y = 0; y < D; ++y) yq[y] = hist_times_centroids(hist.data() + h, Mv, nq, vcb.cb, D / Mv, y);
            for (int y = 0; y < D; ++y) {
                float& a = st.acc[h * D + (vcb.rot ? y : value_dim(vcb, y))];
                a = a * f.a + (vcb.rot ? f.b * rotated_back(vcb, yq.data(), y) : f.b * value_gain(vcb, y) * yq[y]);
            }
            merge_stats(st.m[h], st.l[h], m[h], l_new);
            m[h] = kNegInf;
        }
        std::fill(lw.begin(), lw.end(), 0.0f);
    };
    const bool any = for_each_chunk_page(p, b, kv, chunk, [&](int version) {
        if (cur >= 0) flush();
        cur = version;
        vcb = version_tables(p, b, kv, cur, nq, lut);
    }, [&](const std::uint32_t* kb, const std::uint32_t* vb, int n_tok) {
        const int n_blocks = (n_tok + kBlockTokens - 1) / kBlockTokens;
        for (int tile0 = 0; tile0 < n_blocks; tile0 += kWarps) {
            const int tile_blocks = std::min(kWarps, n_blocks - tile0);
            std::vector<std::vector<std::uint32_t>> sv(tile_blocks, std::vector<std::uint32_t>(mma_staged_dword(vdw)));
            std::vector<float> sc(std::size_t(kWarps) * 32 * nq, kNegInf);
            std::vector<int> valid(kWarps, 0);
            std::vector<std::uint32_t> sk(mma_staged_dword(kdw));
            for (int w = 0; w < tile_blocks; ++w) {
                const int blk = tile0 + w;
                valid[w] = std::min(kBlockTokens, n_tok - blk * kBlockTokens);
                for (int i = 0; i < kdw; ++i) sk[mma_staged_dword(i)] = kb[std::int64_t(blk) * kdw + i];
                for (int i = 0; i < vdw; ++i) sv[w][mma_staged_dword(i)] = vb[std::int64_t(blk) * vdw + i];
                for (int t = 0; t < valid[w]; ++t)
                    for (int h = 0; h < nq; ++h) {
                        float s = 0.0f;  // token_scores: one add per subspace, in order
                        for (int mm = 0; mm < Mk; ++mm)
                            s += lut[(h * Mk + mm) * kKsub + code4(sk.data(), kMmaGroupDwords, t, mm)];
                        sc[(w * 32 + t) * nq + h] = s;
                    }
            }
            std::vector<float> alpha(nq);
            bool grow = false;
            for (int h = 0; h < nq; ++h) {
                float mx = kNegInf;
                for (int i = 0; i < kWarps * 32; ++i) mx = std::max(mx, sc[i * nq + h]);
                const float mn = std::max(m[h], mx);
                alpha[h] = rescale(m[h], mn);
                grow |= m[h] != kNegInf && mn > m[h];
                m[h] = mn;
            }
            if (grow)
                for (auto& a : acc)
                    for (int lane = 0; lane < 32; ++lane)
                        for (int e = 0; e < 4; ++e) {
                            const int h = acc_head(lane & 3, e);
                            a.v[lane][e] *= h < nq ? alpha[h] : 1.0f;
                        }
            for (int w = 0; w < kWarps; ++w) {
                std::vector<float> pr(32 * nq, 0.0f);
                for (int t = 0; t < 32; ++t)
                    for (int h = 0; h < nq; ++h) {
                        pr[t * nq + h] = t < valid[w] ? hd_exp(sc[(w * 32 + t) * nq + h] - m[h]) : 0.0f;
                        float& l = lw[(w * 32 + t) * nq + h];
                        l = l * alpha[h] + weight_from_half(weight_to_half(pr[t * nq + h]));
                    }
                if (w < tile_blocks) {
                    const std::vector<std::uint16_t> wf = weight_fragments(pr.data(), nq);
                    for (int mm = 0; mm < Mv; ++mm) accumulate_block(sv[w].data(), wf, nq, mm, acc[mm].v);
                }
            }
        }
    });
    if (any) flush();
}

/// out [batch][n_kv_heads * n_q][D]: the MMA kernel (chunks + the f16 chunk) and the combine, emulated.
inline std::vector<float> pq_attention_mma(const HostPqProblem& h, int f16_tile_rows) {
    return pq_attention(h, f16_tile_rows, pq_chunk_mma);
}

}  // namespace aqpim::cuda::emulation
