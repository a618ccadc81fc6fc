// Fused decode attention over 8-bit PQ codes (256 centroids per subspace), flash-decoding style.
//
// Same grid, partials, sinks-and-window block and combine as pq_attention.cu. A subspace's tables
// are 16x larger than at 4 bits, so a block cannot hold every table and histogram at once: it
// walks its chunk in segments (up to segment_tokens_8bit(NQ) coded tokens of pages of one codebook
// version) and each segment's subspaces in groups whose tables take 32 KiB (pq_tile_8bit.h):
//
//   keys     per group: the group's tables LUT[m][c][h] built in shared memory from the queries in
//            the version's quantizer space; the group's code rows of a run of blocks staged in
//            shared memory (16-byte cp.async copies, all in flight at once); each thread adds its
//            tokens' lookups to their scores in a shared [tokens][NQ] buffer
//   softmax  the segment's max per head (block reduction), the scores become weights, the block's
//            state is rescaled once per segment
//   values   per group: histograms hist[m][c][h] (warp w owns subspaces w, w + 4, ...; a lane adds
//            a token's weights for all heads with one vector read-modify-write, lanes whose codes
//            meet taking turns), then through the value codebook into the segment's
//            values y [NQ][D] in quantizer space, and at the segment's end into the accumulator
//            (perm and gain, or the rotation)
//
// No value vector is decoded and every code byte is read once from device memory, in 8 KiB of
// copies in flight per block rather than one dependent byte load per token and subspace.

#include "cuda/pq_block.cuh"
#include "cuda/pq_tile_8bit.h"

namespace aqpim::cuda {

namespace {

/// Dynamic shared memory of one block, in floats; every region 16-byte aligned.
struct Pq8Smem {
    int table, weights, qy, y, seg, red, stage;  // offsets
    int total;
    __host__ __device__ Pq8Smem(int nq, int D) {
        const int blocks = segment_tokens_8bit(nq) / kBlockTokens;
        table = 0;                           // [g][256][nq] tables, then histograms
        weights = table + kTable8Floats;     // [tokens][nq] scores, then weights
        qy = weights + segment_floats_8bit(nq);  // [nq][D + 1] queries in the version's key space
        y = qy + up4(nq * (D + 1));          // [nq][D] the segment's values (quantizer space)
        seg = y + up4(nq * D);               // [blocks] key and value block offsets (int64), valid tokens
        red = seg + up4(blocks * 5);         // [2][warps][nq] block reductions
        stage = red + up4(2 * kWarps * nq);  // [blocks][g][32] code rows of the group
        const int coded = stage + kStage8Bytes / 4;
        const int f16 = f16_chunk_floats(nq, D);
        total = coded > f16 ? coded : f16;
    }
};

/// bin[0..NQ) += v for every lane of the warp, lanes whose keys (bins) are equal taking turns in
/// lane order: one vector read-modify-write per lane and turn, no atomics (a float atomicAdd in
/// shared memory is a compare-and-swap loop), no lost update. Two of 32 random codes of 256 meet
/// in ~86% of warps, three in ~7%: mostly two turns.
template <int NQ>
__device__ __forceinline__ void add_in_turns(float* bin, int key, const float (&v)[NQ], int lane) {
    const unsigned peers = __match_any_sync(0xffffffffu, key);
    const int turn = __popc(peers & ((1u << lane) - 1u));
    const int turns = int(__reduce_max_sync(0xffffffffu, unsigned(__popc(peers))));
    for (int r = 0; r < turns; ++r) {
        if (turn == r) {
            float h[NQ];
            load_heads<NQ>(bin, h);
#pragma unroll
            for (int i = 0; i < NQ; ++i) h[i] += v[i];
            store_heads<NQ>(bin, h);
        }
        __syncwarp();  // this turn's stores are seen by the next turn's loads
    }
}

/// Stage rows m0 .. m0 + g - 1 of segment blocks [j0, j1) (pool offsets seg) into `stage`: every
/// 16-byte copy in flight at once, then wait for them. Called by the whole block; the caller
/// synchronises before (the stage's previous readers) and this synchronises after.
__device__ __forceinline__ void stage_rows(const std::uint8_t* pool, const std::int64_t* seg, int j0, int j1, int m0,
                                           int g, std::uint8_t* stage) {
    for (int q = threadIdx.x; q < (j1 - j0) * g * 2; q += kThreads) {
        const StageChunk c = stage_chunk(seg, j0, m0, g, q);
        cp_async_16(stage + c.dst, pool + c.src, true);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
}

template <int NQ, int D>
__global__ void __launch_bounds__(kThreads) pq_attention_8bit_kernel(PqAttentionParams p) {
    __shared__ BlockState<NQ, D> st;
    extern __shared__ float4 dyn4[];
    float* dyn = reinterpret_cast<float*>(dyn4);
    const PqBlockIds id(p);
    const int b = id.b, kv = id.kv, n_q = p.shape.n_q, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    block_state_init(st);
    if (id.f16_block(p)) return attend_f16_chunk<NQ, D>(p, id.q, b, kv, id.part_slot, st, dyn4);

    constexpr int kSegBlocks = segment_tokens_8bit(NQ) / kBlockTokens, kGroup = group_subspaces_8bit(NQ);
    constexpr int kQyStride = D + 1;  // the heads' rows of qy in different banks while the tables are built
    const Pq8Smem lay(NQ, D);
    float* table = dyn + lay.table;
    float* w = dyn + lay.weights;
    float* qy = dyn + lay.qy;
    float* y = dyn + lay.y;
    auto* seg_k = reinterpret_cast<std::int64_t*>(dyn + lay.seg);  // pool offsets of the segment's blocks
    std::int64_t* seg_v = seg_k + kSegBlocks;
    int* seg_n = reinterpret_cast<int*>(seg_v + kSegBlocks);       // valid tokens of each block
    float* red = dyn + lay.red;
    auto* stage = reinterpret_cast<std::uint8_t*>(dyn + lay.stage);

    const int Mk = p.Mk, Mv = p.Mv, dk = D / Mk, dv = D / Mv;
    const int n_coded = p.n_coded[b];
    const int n_pages = (n_coded + p.page_tokens - 1) / p.page_tokens;
    const int page_end = min((id.chunk + 1) * p.chunk_pages, n_pages);
    PqCodebookView kcb{}, vcb{};
    int cur = -1;
    int pg = id.chunk * p.chunk_pages, blk = 0;  // the next block to attend: block blk of page pg
    while (pg < page_end) {  // block-uniform: every thread walks the same pages
        __syncthreads();     // the previous segment's readers of the lists, qy and y are done
        const int ver = p.page_version[std::int64_t(b) * p.max_pages + pg];
        if (ver != cur) {
            cur = ver;
            kcb = codebook_view(p, codebook_slot(p, b, ver, kv), false);
            vcb = codebook_view(p, codebook_slot(p, b, ver, kv), true);
            for (int i = tid; i < NQ * D; i += kThreads) qy[i / D * kQyStride + i % D] = group_query_element(p, id.q, kcb, i);
        }
        const int n_blocks = next_segment(p, b, kv, page_end, cur, kSegBlocks, tid, kThreads, pg, blk,
                                          [&](int j, std::int64_t k_off, std::int64_t v_off, int valid) {
                                              seg_k[j] = k_off;
                                              seg_v[j] = v_off;
                                              seg_n[j] = valid;
                                          });
        const int n_tok = n_blocks * kBlockTokens;

        // Keys, a group of subspaces at a time: its tables, then its code rows staged a run of
        // blocks at a time and every token's lookups added to its score.
        for (int m0 = 0; m0 < Mk; m0 += kGroup) {
            const int g = min(kGroup, Mk - m0), run = stage_blocks_8bit(g);
            __syncthreads();  // the previous group's tables are read (and the lists and qy written)
            for (int i = tid; i < g * kKsub8 * NQ; i += kThreads) {
                const int h = i % NQ, r = i / NQ;  // r = (m - m0) * 256 + c
                table[i] = lut_entry(qy + h * kQyStride, kcb.cb, dk, m0 + r / kKsub8, r % kKsub8, kKsub8);
            }
            for (int j0 = 0; j0 < n_blocks; j0 += run) {
                const int j1 = min(n_blocks, j0 + run);
                __syncthreads();  // the tables are built, the stage's previous rows read
                stage_rows(p.pool, seg_k, j0, j1, m0, g, stage);
                for (int t = j0 * kBlockTokens + tid; t < j1 * kBlockTokens; t += kThreads) {
                    const int j_rel = t / kBlockTokens - j0, tb = t % kBlockTokens;
                    float s[NQ];
                    if (m0 == 0) {
#pragma unroll
                        for (int h = 0; h < NQ; ++h) s[h] = 0.0f;
                    } else {
                        load_heads<NQ>(w + t * NQ, s);
                    }
                    for (int m = 0; m < g; ++m) {
                        float e[NQ];
                        load_heads<NQ>(table + (m * kKsub8 + staged_code(stage, j_rel, g, m, tb)) * NQ, e);
#pragma unroll
                        for (int h = 0; h < NQ; ++h) s[h] += e[h];
                    }
                    store_heads<NQ>(w + t * NQ, s);
                }
            }
        }
        __syncthreads();  // every token's score is written (by whichever thread took it)

        // Softmax: the segment's max, the weights (in place of the scores), the state rescaled.
        float mx[NQ];
#pragma unroll
        for (int h = 0; h < NQ; ++h) mx[h] = kNegInf;
        for (int t = tid; t < n_tok; t += kThreads)
            if (t % kBlockTokens < seg_n[t / kBlockTokens]) {
                float s[NQ];
                load_heads<NQ>(w + t * NQ, s);
#pragma unroll
                for (int h = 0; h < NQ; ++h) mx[h] = fmaxf(mx[h], s[h]);
            }
#pragma unroll
        for (int h = 0; h < NQ; ++h) {
            const float v = warp_max(mx[h]);
            if (lane == 0) red[warp * NQ + h] = v;
        }
        __syncthreads();
        float mnew[NQ], alpha[NQ], sum[NQ];
#pragma unroll
        for (int h = 0; h < NQ; ++h) {
            float m = st.m[h];
            for (int wi = 0; wi < kWarps; ++wi) m = fmaxf(m, red[wi * NQ + h]);
            mnew[h] = m;
            alpha[h] = rescale(st.m[h], m);
            sum[h] = 0.0f;
        }
        for (int t = tid; t < n_tok; t += kThreads) {
            const bool valid = t % kBlockTokens < seg_n[t / kBlockTokens];
            float s[NQ];
            load_heads<NQ>(w + t * NQ, s);
#pragma unroll
            for (int h = 0; h < NQ; ++h) {
                s[h] = valid ? hd_exp(s[h] - mnew[h]) : 0.0f;
                sum[h] += s[h];
            }
            store_heads<NQ>(w + t * NQ, s);
        }
#pragma unroll
        for (int h = 0; h < NQ; ++h) {
            const float v = warp_sum(sum[h]);
            if (lane == 0) red[(kWarps + warp) * NQ + h] = v;
        }
#pragma unroll
        for (int h = 0; h < NQ; ++h)
            for (int d = tid; d < D; d += kThreads) st.acc[h][d] *= alpha[h];
        __syncthreads();  // every thread has read st.m; the sums are in red
#pragma unroll
        for (int h = 0; h < NQ; ++h)  // compile-time indices: mnew stays in registers
            if (tid == h) {
                float l = st.l[h] * alpha[h];
                for (int wi = 0; wi < kWarps; ++wi) l += red[(kWarps + wi) * NQ + h];
                st.l[h] = l;
                st.m[h] = mnew[h];
            }

        // Values, a group of subspaces at a time: histograms of the weights, then y. Warp w owns
        // the group's subspaces w, w + 4, ... for every token: its lanes take a 32-token block at
        // a time (lane t, token t; padding tokens weigh 0) and add the token's weights for all
        // heads to the bin its code names, lanes that meet in a bin taking turns.
        for (int m0 = 0; m0 < Mv; m0 += kGroup) {
            const int g = min(kGroup, Mv - m0);
            __syncthreads();  // the previous group's histograms (or the key tables) are read
            for (int i = tid; i < g * kKsub8 * NQ; i += kThreads) table[i] = 0.0f;
            const int run = stage_blocks_8bit(g);
            for (int j0 = 0; j0 < n_blocks; j0 += run) {
                const int j1 = min(n_blocks, j0 + run);
                __syncthreads();  // the histograms are zeroed, the stage's previous rows read
                stage_rows(p.pool, seg_v, j0, j1, m0, g, stage);
                for (int j = j0; j < j1 && warp < g; ++j) {  // warp-uniform
                    float wt[NQ];
                    load_heads<NQ>(w + (j * kBlockTokens + lane) * NQ, wt);
                    for (int m = warp; m < g; m += kWarps) {
                        const int c = staged_code(stage, j - j0, g, m, lane);
                        add_in_turns<NQ>(table + (m * kKsub8 + c) * NQ, c, wt, lane);
                    }
                }
            }
            __syncthreads();
            for (int o = tid; o < NQ * g * dv; o += kThreads) {
                const int h = o % NQ, i = m0 * dv + o / NQ;
                y[h * D + i] = hist8_times_centroids(table, NQ, h, m0, vcb.cb, dv, i);
            }
        }
        __syncthreads();
        for (int o = tid; o < NQ * D; o += kThreads) add_original_space(vcb, y + (o / D) * D, o % D, st.acc[o / D]);
    }
    __syncthreads();
    write_partial(st, n_q, p.part_ml, p.part_acc, id.part_slot);
}

struct EightBitFamily {
    template <int NQ, int D>
    static auto* kernel(const PqAttentionParams&) {
        return pq_attention_8bit_kernel<NQ, D>;
    }
    static std::size_t smem_bytes(int nq, int D, const PqAttentionParams&) { return std::size_t(Pq8Smem(nq, D).total) * 4; }
};

}  // namespace

PqKernelFamily pq_8bit_family() { return family_of<EightBitFamily>(); }

}  // namespace aqpim::cuda
