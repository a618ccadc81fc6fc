// Fused decode attention over 4-bit PQ codes, flash-decoding style.
//
// Grid (n_chunks + 1, n_kv_heads, batch), 4 warps per block. Block (c < n_chunks, kv, b) attends pages
// [c * chunk_pages, (c + 1) * chunk_pages) of sequence b's coded tokens for KV head kv's whole GQA
// group; block c = n_chunks attends the f16 rows (sinks and window). Each writes a partial
// (max, sum, accumulator); launch_combine merges them (split-K reduction).
//
// Inside a coded block: when the page's codebook version changes, the group's queries are moved
// into that version's quantizer space and its lookup tables built in shared memory, the group's
// heads interleaved per entry (LUT[m][c][h]) so one vector load serves every head. Each warp takes
// 32-token code blocks in turn: the block's K and V codes are copied with 16-byte loads into a
// padded shared-memory stage; lane t scores token t from the tables (one code extraction for all
// heads); an online softmax per warp; the weights go through a per-warp buffer to the warp's value
// histogram hist[c][m][h] (lane = subspace, one vector read-modify-write for all heads, no atomics,
// no decoded vectors). A version change or the end flushes the histograms through the value
// codebook (original space, via perm and gain) into the block's state.

#include "cuda/pq_attention.h"
#include "cuda/pq_block.cuh"

namespace aqpim::cuda {

namespace {

/// Dynamic shared memory of one block, in floats / dwords; every region 16-byte aligned. Per warp,
/// the key stage and the weights buffer share one scratch region (the weights are written once the
/// scores are taken); the group's queries in quantizer space (only read while the tables are
/// built, when no warp stages codes) overlay the warps' scratch and value stages.
struct PqSmem {
    int lut, hist, scratch, stage_v, qy;  // offsets
    int scratch_size, hist_size, stage_v_size;
    int total;
    __host__ __device__ PqSmem(int nq, int D, int Mk, int Mv) {
        const int gk = up4((Mk + 3) / 4 * kStageGroupDwords), gv = up4((Mv + 3) / 4 * kStageGroupDwords);
        const int pb = up4(nq * kBlockTokens);
        scratch_size = gk > pb ? gk : pb;
        hist_size = up4(nq * kKsub * Mv);
        stage_v_size = gv;
        lut = 0;
        hist = lut + up4(nq * Mk * kKsub);
        scratch = hist + kWarps * hist_size;
        stage_v = scratch + kWarps * scratch_size;
        qy = scratch;  // nq * D <= kWarps * nq * 32 (D <= 128): fits in the scratch regions
        const int coded = stage_v + kWarps * stage_v_size;
        const int f16 = f16_chunk_floats(nq, D);
        total = coded > f16 ? coded : f16;
    }
};

template <int NQ, int D, bool kRot>
__global__ void __launch_bounds__(kThreads, NQ >= 8 ? 2 : 4) pq_attention_kernel(PqAttentionParams p) {
    __shared__ BlockState<NQ, D> st;
    extern __shared__ float4 dyn4[];
    float* dyn = reinterpret_cast<float*>(dyn4);
    const PqBlockIds id(p);
    const int chunk = id.chunk, kv = id.kv, b = id.b, n_q = p.shape.n_q;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* q = id.q;
    block_state_init(st);
    if (id.f16_block(p)) return attend_f16_chunk<NQ, D>(p, q, b, kv, id.part_slot, st, dyn4);

    const int Mk = p.Mk, Mv = p.Mv, kdw = block_dwords(Mk), vdw = block_dwords(Mv);
    const PqSmem lay(NQ, D, Mk, Mv);
    float* lut = dyn + lay.lut;  // [Mk][16][NQ]
    float* qy = dyn + lay.qy;    // [NQ][D], while the tables are built
    float* hist = dyn + lay.hist + warp * lay.hist_size;  // this warp's [16][Mv][NQ]
    float* pbuf = dyn + lay.scratch + warp * lay.scratch_size;  // this warp's [32][NQ], after the scores
    std::uint32_t* sk = reinterpret_cast<std::uint32_t*>(pbuf);  // this warp's key stage, before them
    std::uint32_t* sv = reinterpret_cast<std::uint32_t*>(dyn + lay.stage_v) + warp * lay.stage_v_size;
    for (int i = lane; i < NQ * kKsub * Mv; i += 32) hist[i] = 0.0f;

    const int n_coded = p.n_coded[b];
    const int n_pages = (n_coded + p.page_tokens - 1) / p.page_tokens;
    const int page_end = min((chunk + 1) * p.chunk_pages, n_pages);
    float mw[NQ], lw[NQ];
#pragma unroll
    for (int h = 0; h < NQ; ++h) {
        mw[h] = kNegInf;
        lw[h] = 0.0f;
    }
    PqCodebookView vcb{};
    int cur = -1;

    // Histograms of this version -> block state (original space); resets the warps' states.
    const auto flush = [&]() {
        __syncwarp();
#pragma unroll
        for (int h = 0; h < NQ; ++h) {
            const float l = warp_sum(lw[h]);
            if (lane == 0) {
                st.wm[warp][h] = mw[h];
                st.wl[warp][h] = l;
            }
            mw[h] = kNegInf;
            lw[h] = 0.0f;
        }
        if (vcb.rot) {  // block-uniform: quantizer-space values into wacc, R^T through the histogram
            for (int i = lane; i < NQ * D; i += 32)
                st.wacc[warp][i / D][i % D] = hist_times_centroids(hist + i / D, Mv, NQ, vcb.cb, D / Mv, i % D);
            __syncwarp();
            for (int i = lane; i < NQ * D; i += 32) hist[i] = rotated_back(vcb, st.wacc[warp][i / D], i % D);
            __syncwarp();  // NQ * D <= NQ * 16 * Mv (checked: D / Mv <= 16 when rotated)
            for (int i = lane; i < NQ * D; i += 32) st.wacc[warp][i / D][i % D] = hist[i];
        } else {
            for (int i = lane; i < NQ * D; i += 32) {
                const int h = i / D, y = i % D;
                st.wacc[warp][h][value_dim(vcb, y)] =
                    value_gain(vcb, y) * hist_times_centroids(hist + h, Mv, NQ, vcb.cb, D / Mv, y);
            }
        }
        __syncwarp();
        for (int i = lane; i < NQ * kKsub * Mv; i += 32) hist[i] = 0.0f;
        block_merge_warps(st);
    };

    for (int pg = chunk * p.chunk_pages; pg < page_end; ++pg) {
        const std::int64_t pt = std::int64_t(b) * p.max_pages + pg;
        const int ver = p.page_version[pt];
        if (ver != cur) {  // block-uniform
            if (cur >= 0) flush();
            const std::int64_t cs = codebook_slot(p, b, ver, kv);
            const PqCodebookView kcb = rotation_if<kRot>(codebook_view(p, cs, false));
            vcb = rotation_if<kRot>(codebook_view(p, cs, true));
            build_group_tables<NQ, D>(q, n_q, p.shape.scale, kcb, Mk, qy, lut);
            cur = ver;
        }
        const std::uint8_t* page = p.pool + p.page_offset[pt];
        const auto* kblocks = reinterpret_cast<const std::uint32_t*>(page + p.k_stream_off[kv]);
        const auto* vblocks = reinterpret_cast<const std::uint32_t*>(page + p.v_stream_off[kv]);
        const int n_tok = min(p.page_tokens, n_coded - pg * p.page_tokens);
        const int n_blocks = (n_tok + kBlockTokens - 1) / kBlockTokens;
        for (int blk = warp; blk < n_blocks; blk += kWarps) {
            stage_block(kblocks + std::int64_t(blk) * kdw, kdw, sk, lane);
            stage_block(vblocks + std::int64_t(blk) * vdw, vdw, sv, lane);
            __syncwarp();
            const int valid = min(kBlockTokens, n_tok - blk * kBlockTokens);
            float sc[NQ], pr[NQ], alpha[NQ];
            token_scores<NQ>(lut, sk, kStageGroupDwords, lane, Mk, sc);
            bool grow = false;
#pragma unroll
            for (int h = 0; h < NQ; ++h) {
                const float s = lane < valid ? sc[h] : kNegInf;
                const float mn = fmaxf(mw[h], warp_max(s));
                alpha[h] = rescale(mw[h], mn);
                grow |= mw[h] != kNegInf && mn > mw[h];
                mw[h] = mn;
                pr[h] = lane < valid ? hd_exp(s - mn) : 0.0f;
                lw[h] = lw[h] * alpha[h] + pr[h];
            }
            __syncwarp();  // every lane has read the key stage, which the weights overwrite
            store_heads<NQ>(pbuf + lane * NQ, pr);
            if (grow)  // warp-uniform: the max moved, earlier weights shrink
                for (int mm = lane; mm < Mv; mm += 32)
                    for (int c = 0; c < kKsub; ++c) {
                        float hv[NQ];
                        float* at = hist + (c * Mv + mm) * NQ;
                        load_heads<NQ>(at, hv);
#pragma unroll
                        for (int h = 0; h < NQ; ++h) hv[h] *= alpha[h];
                        store_heads<NQ>(at, hv);
                    }
            __syncwarp();
            // Tokens in pairs: both bins are read before either is written, so a lane's chain of
            // dependent shared-memory round trips is one per pair. When the two codes are equal the
            // bins are one: both reads see the same value, both sums take both weights, and the two
            // stores write the same number.
            int t = 0;
            for (; t + 1 < valid; t += 2) {
                float pa[NQ], pb[NQ];
                load_heads<NQ>(pbuf + t * NQ, pa);  // broadcasts
                load_heads<NQ>(pbuf + (t + 1) * NQ, pb);
                for (int mm = lane; mm < Mv; mm += 32) {
                    const int ca = code4(sv, kStageGroupDwords, t, mm), cb = code4(sv, kStageGroupDwords, t + 1, mm);
                    float* at_a = hist + (ca * Mv + mm) * NQ;
                    float* at_b = hist + (cb * Mv + mm) * NQ;
                    const bool same = ca == cb;
                    float ha[NQ], hb[NQ];
                    load_heads<NQ>(at_a, ha);
                    load_heads<NQ>(at_b, hb);
#pragma unroll
                    for (int h = 0; h < NQ; ++h) {
                        ha[h] += pa[h] + (same ? pb[h] : 0.0f);
                        hb[h] += pb[h] + (same ? pa[h] : 0.0f);
                    }
                    store_heads<NQ>(at_a, ha);
                    store_heads<NQ>(at_b, hb);
                }
            }
            if (t < valid) {
                float ph[NQ];
                load_heads<NQ>(pbuf + t * NQ, ph);
                for (int mm = lane; mm < Mv; mm += 32) {
                    float* at = hist + (code4(sv, kStageGroupDwords, t, mm) * Mv + mm) * NQ;
                    float hv[NQ];
                    load_heads<NQ>(at, hv);
#pragma unroll
                    for (int h = 0; h < NQ; ++h) hv[h] += ph[h];
                    store_heads<NQ>(at, hv);
                }
            }
            __syncwarp();
        }
    }
    finish_coded_block(cur >= 0, flush, st, p, id.part_slot);
}

struct HistogramFamily {
    template <int NQ, int D>
    static auto* kernel(const PqAttentionParams& p) {
        return has_rotations(p) ? pq_attention_kernel<NQ, D, true> : pq_attention_kernel<NQ, D, false>;
    }
    static std::size_t smem_bytes(int nq, int D, const PqAttentionParams& p) {
        return std::size_t(PqSmem(nq, D, p.Mk, p.Mv).total) * 4;
    }
};

}  // namespace

const char* to_string(PqValuePath path) {
    switch (path) {
        case PqValuePath::histogram: return "histogram";
        case PqValuePath::mma: return "mma";
        case PqValuePath::mma_wide: return "mma_wide";
    }
    return "?";
}

namespace {

/// The kernel that serves codes of p's width through `path`.
PqKernelFamily family_for(const PqAttentionParams& p, PqValuePath path) {
    if (p.nbits == 8) return pq_8bit_family();
    if (is_mma(path)) return pq_mma_family(path == PqValuePath::mma_wide ? 3 : 4);
    return family_of<HistogramFamily>();
}

}  // namespace

std::size_t pq_attention_smem_bytes(const PqAttentionParams& p, PqValuePath path) {
    return family_for(p, path).smem_bytes(p);
}

int pq_attention_blocks_per_sm(const PqAttentionParams& p, PqValuePath path) {
    check_attention_shape(p.shape);
    return family_for(p, path).blocks_per_sm(p);
}

void launch_pq_attention(const PqAttentionParams& p, cudaStream_t stream, PqValuePath path) {
    check_pq_attention_params(p);
    AQPIM_CUDA_REQUIRE(p.nbits == 4 || path == PqValuePath::histogram,
                       "the tensor-core value path reads 4-bit codes; 8-bit codes take the histogram path");
    family_for(p, path).launch(p, stream);
    launch_combine(p.shape, p.n_chunks + 1, p.part_ml, p.part_acc, p.out, stream);
}

}  // namespace aqpim::cuda
