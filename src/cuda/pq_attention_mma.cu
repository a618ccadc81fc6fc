// Fused decode attention over 4-bit PQ codes, the values added up on the tensor cores.
//
// Same grid, chunks, tables, scores and sinks-and-window block as pq_attention.cu; what differs is
// where the value histograms live. There, every warp keeps its own histogram hist[c][m][h] in shared
// memory and updates it token by token (a read-modify-write per token and subspace: the shared-memory
// pipe binds, docs/cuda.md). Here the histograms are mma.sync accumulators in registers: for value
// subspace m, H_m[c][h] += OneHot_m^T (codes x tokens) * W (tokens x heads), f16 inputs (the one-hot
// codes are exact; the weights are rounded to f16) and f32 accumulation (mma_tile.h has the
// fragment layouts). A warp owns the subspaces of the code groups warp, warp + 4, ... for every
// token of the chunk, so all warps need every token's weight under one common max:
//
//   per tile of 4 code blocks (128 tokens; warp w stages and scores block w):
//     scores -> shared [128][NQ]                      | barrier
//     every warp: the tile's max per head, the new running max (the same in every warp), its
//     own block's weights -> f16 B fragments in shared; rescale accumulators if the max grew
//                                                     | barrier
//     every warp: for each block and k-step, the weights' B fragment (one 8-byte load), then per
//     owned subspace the one-hot A fragment (codes -> f16 1024 + c -> __heq2) and one mma.
//
// Codes, scores and weights are double-buffered by tile: each warp's cp.async copies of the next
// tile's code blocks are issued right after the first barrier and land while this tile's weights
// and values are computed, and two barriers per tile suffice. A version change or the end writes
// the accumulators to hist[c][m][h] and takes them through the value codebook (original space)
// into the block's state.

#include "cuda/mma_tile.h"
#include "cuda/pq_block.cuh"
#include "cuda/require.h"

namespace aqpim::cuda {

namespace {

/// 4-subspace value groups a warp owns at most: instances for Mv <= 32 (2) and Mv <= 64 (4), so
/// the common Mv = 32 keeps 32 accumulators per lane, not 64.
__host__ __device__ constexpr int own_groups(int Mv) { return ((Mv + 3) / 4 + kWarps - 1) / kWarps <= 2 ? 2 : 4; }
constexpr int kTileTokens = kWarps * kBlockTokens;

/// Dynamic shared memory of one block, in floats / dwords; every region 16-byte aligned.
struct MmaSmem {
    int lut, hist, qy, stage_k, stage_v, scores, weights;  // offsets
    int stage_k_size, stage_v_size, scores_size;
    int total;
    __host__ __device__ MmaSmem(int nq, int D, int Mk, int Mv) {
        stage_k_size = (Mk + 3) / 4 * kMmaGroupDwords;
        stage_v_size = (Mv + 3) / 4 * kMmaGroupDwords;
        scores_size = up4(kTileTokens * nq);
        lut = 0;                                           // [Mk][16][nq]
        hist = lut + up4(nq * Mk * kKsub);                 // [16][Mv][nq], at flushes
        qy = hist + up4(nq * kKsub * Mv);                  // [nq][D], while tables are built
        stage_k = qy + up4(nq * D);                        // [2][warp]
        stage_v = stage_k + 2 * kWarps * stage_k_size;     // [2][warp]
        scores = stage_v + 2 * kWarps * stage_v_size;      // [2][128][nq]
        weights = scores + 2 * scores_size;                // [2][block][kWeightBlockDwords]
        const int coded = weights + 2 * kWarps * kWeightBlockDwords;
        const int f16 = f16_chunk_floats(nq, D);
        total = coded > f16 ? coded : f16;
    }
};

/// A tile of a chunk: up to kWarps code blocks of one page, from block `first`.
struct Tile {
    int page = 0, first = 0, n_tok = 0;  ///< n_tok: coded tokens of the page
    __device__ int blocks() const { return min(kWarps, (n_tok + kBlockTokens - 1) / kBlockTokens - first); }
};

/// Tokens of page pg of a sequence with n_coded coded tokens.
__device__ __forceinline__ int page_tokens_of(const PqAttentionParams& p, int n_coded, int pg) {
    return min(p.page_tokens, n_coded - pg * p.page_tokens);
}

/// The tile after t (n_tok = 0 past the chunk's last page).
__device__ __forceinline__ Tile next_tile(const PqAttentionParams& p, int n_coded, int page_end, Tile t) {
    t.first += kWarps;
    if (t.first * kBlockTokens >= t.n_tok) {
        t.first = 0;
        ++t.page;
        t.n_tok = t.page < page_end ? page_tokens_of(p, n_coded, t.page) : 0;
    }
    return t;
}

/// This warp's K and V code blocks of tile t (if it has one) copied into its stages with cp.async,
/// 16 bytes a lane at a time; always one commit group.
__device__ __forceinline__ void prefetch_blocks(const PqAttentionParams& p, int b, int kv, const Tile& t, int warp,
                                                int lane, std::uint32_t* sk, std::uint32_t* sv) {
    const int blk = t.first + warp;
    if (t.n_tok > 0 && blk * kBlockTokens < t.n_tok) {
        const std::uint8_t* page = p.pool + p.page_offset[std::int64_t(b) * p.max_pages + t.page];
        for (int values = 0; values < 2; ++values) {
            const int n_dw = block_dwords(values ? p.Mv : p.Mk);
            const auto* src = reinterpret_cast<const uint4*>(page + (values ? p.v_stream_off : p.k_stream_off)[kv]) +
                              std::int64_t(blk) * (n_dw / 4);
            std::uint32_t* dst = values ? sv : sk;
            for (int i4 = lane; i4 * 4 < n_dw; i4 += 32) cp_async_16(dst + mma_staged_dword(4 * i4), src + i4, true);
        }
    }
    cp_async_commit();
}

/// c += A (16 x 16, f16) * B (16 x 8, f16), f32 accumulators (fragments: mma_tile.h).
__device__ __forceinline__ void mma_f16_f32(float (&c)[4], const std::uint32_t (&a)[4], uint2 b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
#else
    __trap();  // mma.sync m16n8k16 needs sm_80 or later; the launcher refuses older devices
#endif
}

/// v[i] of a warp-uniform array at a lane-dependent index (`other` past NQ), without local memory.
template <int NQ>
__device__ __forceinline__ float pick(const float (&v)[NQ], int i, float other) {
    float r = other;
#pragma unroll
    for (int h = 0; h < NQ; ++h) r = i == h ? v[h] : r;
    return r;
}

template <int NQ, int D, int kMaxOwnGroups, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) pq_attention_mma_kernel(PqAttentionParams p) {
    __shared__ BlockState<NQ, D> st;
    extern __shared__ float4 dyn4[];
    float* dyn = reinterpret_cast<float*>(dyn4);
    auto* words = reinterpret_cast<std::uint32_t*>(dyn4);
    const PqBlockIds id(p);
    const int chunk = id.chunk, kv = id.kv, b = id.b, n_q = p.shape.n_q;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, qd = lane & 3;  // the lane's row group and column pair in the fragments
    const float* q = id.q;
    block_state_init(st);
    if (id.f16_block(p)) return attend_f16_chunk<NQ, D>(p, q, b, kv, id.part_slot, st, dyn4);

    const int Mk = p.Mk, Mv = p.Mv;
    const MmaSmem lay(NQ, D, Mk, Mv);
    float* lut = dyn + lay.lut;
    float* hist = dyn + lay.hist;
    float* qy = dyn + lay.qy;
    const int n_groups = (Mv + 3) / 4;

    float acc[kMaxOwnGroups][4][4];  // [owned group][subspace in group][fragment element]
#pragma unroll
    for (int j = 0; j < kMaxOwnGroups; ++j)
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][s][e] = 0.0f;
    float m[NQ], lw[NQ];  // m: the running max, the same in every lane and warp; lw: this lane's sums
#pragma unroll
    for (int h = 0; h < NQ; ++h) {
        m[h] = kNegInf;
        lw[h] = 0.0f;
    }

    const int n_coded = p.n_coded[b];
    const int n_pages = (n_coded + p.page_tokens - 1) / p.page_tokens;
    const int page_end = min((chunk + 1) * p.chunk_pages, n_pages);
    PqCodebookView vcb{};
    int cur = -1, parity = 0;

    // Accumulators of this version -> hist -> block state (original space); resets them.
    const auto flush = [&]() {
#pragma unroll
        for (int j = 0; j < kMaxOwnGroups; ++j) {
            const int grp = warp + kWarps * j;
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int mm = 4 * grp + s;
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int h = acc_head(qd, e);
                    if (grp < n_groups && mm < Mv && h < NQ)
                        hist[(acc_code(g, e) * Mv + mm) * NQ + h] = acc[j][s][e] * kWeightUnscale;
                    acc[j][s][e] = 0.0f;
                }
            }
        }
#pragma unroll
        for (int h = 0; h < NQ; ++h) {
            const float l = warp_sum(lw[h]);
            if (lane == 0) st.wl[warp][h] = l;
            lw[h] = 0.0f;
        }
        __syncthreads();
        const bool rotated = vcb.rot != nullptr;  // block-uniform
        if (rotated) {  // quantizer-space values into qy (free until the next tables), then R^T
            for (int i = threadIdx.x; i < NQ * D; i += blockDim.x)
                qy[i] = hist_times_centroids(hist + i / D, Mv, NQ, vcb.cb, D / Mv, i % D);
            __syncthreads();
        }
        for (int i = threadIdx.x; i < NQ * D; i += blockDim.x) {
            const int h = i / D, y = i % D;
            float l_new = 0.0f, mb = st.m[h], lb = st.l[h];
            for (int w = 0; w < kWarps; ++w) l_new += st.wl[w][h];
            const MergeFactors f = merge_stats(mb, lb, pick(m, h, kNegInf), l_new);
            const int x = rotated ? y : value_dim(vcb, y);
            const float added = rotated ? f.b * rotated_back(vcb, qy + h * D, y)
                                        : f.b * value_gain(vcb, y) * hist_times_centroids(hist + h, Mv, NQ, vcb.cb, D / Mv, y);
            st.acc[h][x] = st.acc[h][x] * f.a + added;
        }
        __syncthreads();
        if (threadIdx.x < NQ) {
            const int h = threadIdx.x;
            float l_new = 0.0f;
            for (int w = 0; w < kWarps; ++w) l_new += st.wl[w][h];
            merge_stats(st.m[h], st.l[h], pick(m, h, kNegInf), l_new);
        }
        __syncthreads();
#pragma unroll
        for (int h = 0; h < NQ; ++h) m[h] = kNegInf;
    };

    const auto stage_k = [&](int par) { return words + lay.stage_k + (par * kWarps + warp) * lay.stage_k_size; };
    const auto stage_v = [&](int par) { return words + lay.stage_v + par * kWarps * lay.stage_v_size; };
    Tile tile;
    tile.page = chunk * p.chunk_pages;
    tile.n_tok = tile.page < page_end ? page_tokens_of(p, n_coded, tile.page) : 0;
    prefetch_blocks(p, b, kv, tile, warp, lane, stage_k(0), stage_v(0) + warp * lay.stage_v_size);
    for (; tile.n_tok > 0; tile = next_tile(p, n_coded, page_end, tile), parity ^= 1) {
        const int ver = p.page_version[std::int64_t(b) * p.max_pages + tile.page];
        if (ver != cur) {  // block-uniform
            if (cur >= 0) flush();
            const std::int64_t cs = codebook_slot(p, b, ver, kv);
            vcb = codebook_view(p, cs, true);
            build_group_tables<NQ, D>(q, n_q, p.shape.scale, codebook_view(p, cs, false), Mk, qy, lut);
            cur = ver;
        }
        const int blk = tile.first + warp;
        const int valid = max(0, min(kBlockTokens, tile.n_tok - blk * kBlockTokens));
        const std::uint32_t* sv_tile = stage_v(parity);
        float* sc_tile = dyn + lay.scores + parity * lay.scores_size;
        std::uint32_t* w_tile = words + lay.weights + parity * kWarps * kWeightBlockDwords;

        cp_async_wait<0>();  // this warp's blocks of the tile have landed
        __syncwarp();
        float sc[NQ];
#pragma unroll
        for (int h = 0; h < NQ; ++h) sc[h] = kNegInf;
        if (valid > 0) {  // warp-uniform
            token_scores<NQ>(lut, stage_k(parity), kMmaGroupDwords, lane, Mk, sc);
            if (lane >= valid)
#pragma unroll
                for (int h = 0; h < NQ; ++h) sc[h] = kNegInf;
        }
        store_heads<NQ>(sc_tile + (warp * kBlockTokens + lane) * NQ, sc);
        __syncthreads();  // the tile's scores and value codes are staged; the other buffers are free
        prefetch_blocks(p, b, kv, next_tile(p, n_coded, page_end, tile), warp, lane, stage_k(parity ^ 1),
                        stage_v(parity ^ 1) + warp * lay.stage_v_size);

        float alpha[NQ];
        bool grow = false;
        auto* w_half = reinterpret_cast<std::uint16_t*>(w_tile + warp * kWeightBlockDwords);
#pragma unroll
        for (int h = 0; h < NQ; ++h) {
            float mx = kNegInf;
#pragma unroll
            for (int r = 0; r < kWarps; ++r) mx = fmaxf(mx, sc_tile[(r * kBlockTokens + lane) * NQ + h]);
            const float mn = fmaxf(m[h], warp_max(mx));
            alpha[h] = rescale(m[h], mn);
            grow |= m[h] != kNegInf && mn > m[h];
            m[h] = mn;
            // The sums take the weight the histogram gets (f16, scaled): outputs stay convex mixes.
            const std::uint16_t w16 = weight_to_half(lane < valid ? hd_exp(sc[h] - mn) : 0.0f);
            lw[h] = lw[h] * alpha[h] + weight_from_half(w16);
            if (valid > 0) w_half[weight_half_index(lane, h)] = w16;
        }
        if (grow) {  // warp-uniform (every warp sees the same maxima): earlier weights shrink
            const float a_lo = pick(alpha, acc_head(qd, 0), 1.0f), a_hi = pick(alpha, acc_head(qd, 1), 1.0f);
#pragma unroll
            for (int j = 0; j < kMaxOwnGroups; ++j)
#pragma unroll
                for (int s = 0; s < 4; ++s)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[j][s][e] *= (e & 1) ? a_hi : a_lo;
        }
        __syncthreads();  // every block's weights are written

        const int tile_blocks = tile.blocks();
        for (int bb = 0; bb < tile_blocks; ++bb) {
            const std::uint32_t* sv = sv_tile + bb * lay.stage_v_size;
            const std::uint32_t* wb = w_tile + bb * kWeightBlockDwords;
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {
                const uint2 w2 =
                    g < NQ ? *reinterpret_cast<const uint2*>(wb + weight_fragment_dword(ks, lane)) : make_uint2(0u, 0u);
#pragma unroll
                for (int j = 0; j < kMaxOwnGroups; ++j) {
                    const int grp = warp + kWarps * j;
                    if (grp < n_groups) {
                        const std::uint32_t* gw = sv + grp * kMmaGroupDwords;
                        const std::uint32_t d0 = gw[mma_token_dword(ks, 0, qd)], d1 = gw[mma_token_dword(ks, 1, qd)];
#pragma unroll
                        for (int s = 0; s < 4; ++s)
                            if (4 * grp + s < Mv) {
                                std::uint32_t a[4];
                                onehot_fragment_from(d0, d1, s, g, a);
                                mma_f16_f32(acc[j][s], a, w2);
                            }
                    }
                }
            }
        }
    }
    cp_async_wait<0>();  // only empty groups are left
    finish_coded_block(cur >= 0, flush, st, p, id.part_slot);
}

/// kMinBlocks: blocks per multiprocessor the registers are held to (a group of 8 fits 2 either way,
/// so both builds share its instances).
template <int kMinBlocks>
struct MmaFamily {
    template <int NQ, int D>
    static auto* kernel(const PqAttentionParams& p) {
        constexpr int B = NQ >= 8 ? 2 : kMinBlocks;
        return own_groups(p.Mv) == 2 ? pq_attention_mma_kernel<NQ, D, 2, B> : pq_attention_mma_kernel<NQ, D, 4, B>;
    }
    static std::size_t smem_bytes(int nq, int D, const PqAttentionParams& p) {
        return std::size_t(MmaSmem(nq, D, p.Mk, p.Mv).total) * 4;
    }
};

void require_mma_device() {
    static const int major = [] {
        int dev = 0, cc = 0;
        AQPIM_CUDA(cudaGetDevice(&dev));
        AQPIM_CUDA(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
        return cc;
    }();
    AQPIM_CUDA_REQUIRE(major >= 8, "the mma value path needs a GPU of compute capability 8.0 or later, this one is " +
                                       std::to_string(major) + ".x");
}

template <int kMinBlocks>
PqKernelFamily mma_family() {
    PqKernelFamily f = family_of<MmaFamily<kMinBlocks>>();
    f.launch = [](const PqAttentionParams& p, cudaStream_t stream) {
        require_mma_device();
        dispatch_instance(p.shape, PqFamilyLaunch<MmaFamily<kMinBlocks>>{p, stream});
    };
    return f;
}

}  // namespace

PqKernelFamily pq_mma_family(int min_blocks) {
    AQPIM_CUDA_REQUIRE(min_blocks == 3 || min_blocks == 4,
                       "mma value path: " + std::to_string(min_blocks) + " blocks per multiprocessor (built: 3, 4)");
    return min_blocks == 3 ? mma_family<3>() : mma_family<4>();
}

}  // namespace aqpim::cuda
