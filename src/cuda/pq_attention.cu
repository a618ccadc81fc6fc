// Fused decode attention over 4-bit PQ codes, flash-decoding style.
//
// Grid (n_chunks + 1, n_kv, batch), 4 warps per block. Block (c < n_chunks, kv, b) attends pages
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

#include "cuda/attention_common.cuh"
#include "cuda/cuda_check.h"
#include "cuda/pq_attention.h"

namespace aqpim::cuda {

namespace {

constexpr int kF16Stages = 2;  ///< cp.async ring of the sinks-and-window block

/// Dynamic shared memory of one block, in floats / dwords; every region 16-byte aligned. Per warp,
/// the key stage and the weights buffer share one scratch region (the weights are written once the
/// scores are taken); the group's queries in quantizer space (only read while the tables are
/// built, when no warp stages codes) overlay the warps' scratch and value stages.
struct PqSmem {
    int lut, hist, scratch, stage_v, qy;  // offsets
    int scratch_size, hist_size, stage_v_size;
    int total;
    __host__ __device__ static int up4(int n) { return (n + 3) / 4 * 4; }
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
        // The sinks-and-window block: its cp.async ring, then its scaled queries.
        const int f16 = kWarps * kF16Stages * kF16StageBytes / 4 + nq * D;
        total = coded > f16 ? coded : f16;
    }
    /// Where the sinks-and-window block keeps its scaled queries.
    __host__ __device__ static int f16_queries() { return kWarps * kF16Stages * kF16StageBytes / 4; }
};

/// Copy one block's n_dw dwords (16-byte loads) into the padded stage.
__device__ __forceinline__ void stage_block(const std::uint32_t* src, int n_dw, std::uint32_t* dst, int lane) {
    for (int i4 = lane; i4 * 4 < n_dw; i4 += 32) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(src) + i4);
        const int o = staged_dword(4 * i4);
        dst[o] = v.x;
        dst[o + 1] = v.y;
        dst[o + 2] = v.z;
        dst[o + 3] = v.w;
    }
}

/// NQ consecutive floats of shared memory (16-byte aligned when NQ >= 4) as one or two vector loads.
template <int NQ>
__device__ __forceinline__ void load_heads(const float* src, float (&v)[NQ]) {
    if constexpr (NQ % 4 == 0) {
#pragma unroll
        for (int k = 0; k < NQ / 4; ++k) {
            const float4 x = reinterpret_cast<const float4*>(src)[k];
            v[4 * k] = x.x;
            v[4 * k + 1] = x.y;
            v[4 * k + 2] = x.z;
            v[4 * k + 3] = x.w;
        }
    } else if constexpr (NQ == 2) {
        const float2 x = *reinterpret_cast<const float2*>(src);
        v[0] = x.x;
        v[1] = x.y;
    } else {
        v[0] = *src;
    }
}
template <int NQ>
__device__ __forceinline__ void store_heads(float* dst, const float (&v)[NQ]) {
    if constexpr (NQ % 4 == 0) {
#pragma unroll
        for (int k = 0; k < NQ / 4; ++k)
            reinterpret_cast<float4*>(dst)[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    } else if constexpr (NQ == 2) {
        *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
    } else {
        *dst = v[0];
    }
}

/// Scores of token `lane` of a staged key block for the NQ heads: Σ_m LUT[m][code(t, m)][h], one
/// dword of codes read per 4 subspaces, one vector load per subspace for all heads.
template <int NQ>
__device__ __forceinline__ void token_scores(const float* lut, const std::uint32_t* sk, int lane, int Mk, float (&s)[NQ]) {
#pragma unroll
    for (int h = 0; h < NQ; ++h) s[h] = 0.0f;
    const int shift = (lane >> 4) << 2;
    for (int g = 0; g * 4 < Mk; ++g) {
        const std::uint32_t dw = sk[g * kStageGroupDwords + (lane & 15)] >> shift;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int m = 4 * g + j;
            if (m < Mk) {
                float e[NQ];
                load_heads<NQ>(lut + (m * kKsub + int((dw >> (8 * j)) & 15u)) * NQ, e);
#pragma unroll
                for (int h = 0; h < NQ; ++h) s[h] += e[h];
            }
        }
    }
}

template <int NQ, int D>
__global__ void __launch_bounds__(kThreads, NQ >= 8 ? 2 : 4) pq_attention_kernel(PqAttentionParams p) {
    __shared__ BlockState<NQ, D> st;
    extern __shared__ float4 dyn4[];
    float* dyn = reinterpret_cast<float*>(dyn4);
    const int chunk = blockIdx.x, kv = blockIdx.y, b = blockIdx.z;
    const int n_q = p.shape.n_q, n_kv = p.shape.n_kv, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const std::int64_t part_slot = (std::int64_t(b) * n_kv + kv) * (p.n_chunks + 1) + chunk;
    const float* q = p.q + (std::int64_t(b) * n_kv + kv) * n_q * D;
    block_state_init(st);

    if (chunk == p.n_chunks) {  // the f16 sinks and window
        float (&qs)[NQ][D] = *reinterpret_cast<float(*)[NQ][D]>(dyn + PqSmem::f16_queries());
        load_scaled_queries(q, n_q, p.shape.scale, qs);
        __syncthreads();
        const std::int64_t base = (std::int64_t(b) * n_kv + kv) * p.max_f16 * D;
        attend_f16_rows<NQ, D, kF16Stages>(qs, p.k16 + base, p.v16 + base, 0, p.n_f16[b], st,
                                           reinterpret_cast<uint4*>(dyn4) + warp * (kF16Stages * kF16StageBytes / 16));
        block_merge_warps(st);
        write_partial(st, n_q, p.part_ml, p.part_acc, part_slot);
        return;
    }

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
        for (int i = lane; i < NQ * D; i += 32) {
            const int h = i / D, y = i % D;
            st.wacc[warp][h][value_dim(vcb, y)] =
                value_gain(vcb, y) * hist_times_centroids(hist + h, Mv, NQ, vcb.cb, D / Mv, y);
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
            const PqCodebookView kcb = codebook_view(p, cs, false);
            vcb = codebook_view(p, cs, true);
            __syncthreads();  // the previous version's tables are no longer read
            for (int i = threadIdx.x; i < NQ * D; i += blockDim.x)
                qy[i] = i / D < n_q ? query_in_quantizer_space(q + (i / D) * D, kcb, p.shape.scale, i % D) : 0.0f;
            __syncthreads();
            for (int i = threadIdx.x; i < NQ * Mk * kKsub; i += blockDim.x) {
                const int h = i % NQ, r = i / NQ;  // r = m * 16 + c
                lut[i] = lut_entry(qy + h * D, kcb.cb, D / Mk, r / kKsub, r % kKsub);
            }
            __syncthreads();
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
            token_scores<NQ>(lut, sk, lane, Mk, sc);
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
    if (cur >= 0)
        flush();
    else
        __syncthreads();  // a chunk without pages: the initialised state is written as is
    write_partial(st, n_q, p.part_ml, p.part_acc, part_slot);
}

template <int NQ, int D>
void launch_pq_kernel(const PqAttentionParams& p, cudaStream_t stream) {
    const PqSmem lay(NQ, D, p.Mk, p.Mv);
    const std::size_t bytes = std::size_t(lay.total) * 4;
    auto* kernel = pq_attention_kernel<NQ, D>;
    AQPIM_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    const dim3 grid(p.n_chunks + 1, p.shape.n_kv, p.shape.batch);
    kernel<<<grid, kThreads, bytes, stream>>>(p);
    AQPIM_CUDA_LAUNCHED();
}

struct PqLaunch {
    const PqAttentionParams& p;
    cudaStream_t stream;
    template <int NQ, int D>
    void operator()() const { launch_pq_kernel<NQ, D>(p, stream); }
};

struct PqOccupancy {
    const PqAttentionParams& p;
    int& blocks;
    template <int NQ, int D>
    void operator()() const {
        const std::size_t bytes = std::size_t(PqSmem(NQ, D, p.Mk, p.Mv).total) * 4;
        AQPIM_CUDA(cudaFuncSetAttribute(pq_attention_kernel<NQ, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(bytes)));
        AQPIM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, pq_attention_kernel<NQ, D>, kThreads, bytes));
    }
};

}  // namespace

std::size_t pq_attention_smem_bytes(const PqAttentionParams& p) {
    return std::size_t(PqSmem(group_instance(p.shape.n_q), p.shape.D, p.Mk, p.Mv).total) * 4;
}

int pq_attention_blocks_per_sm(const PqAttentionParams& p) {
    check_attention_shape(p.shape);
    int blocks = 0;
    dispatch_instance(p.shape, PqOccupancy{p, blocks});
    return blocks;
}

void launch_pq_attention(const PqAttentionParams& p, cudaStream_t stream) {
    check_pq_attention_params(p);
    dispatch_instance(p.shape, PqLaunch{p, stream});
    launch_combine(p.shape, p.n_chunks + 1, p.part_ml, p.part_acc, p.out, stream);
}

}  // namespace aqpim::cuda
