#pragma once
// Device building blocks shared by the PQ and the dense f16 decode-attention kernels: warp
// reductions, the per-block online-softmax state in shared memory, the merge of the warps' states,
// the f16-row warp loop (the dense kernel's body, and the PQ kernel's sinks + window chunk), and
// the final reduction across chunks (flash-decoding split-K).

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention_params.h"
#include "cuda/pq_tile.h"

namespace aqpim::cuda {

inline constexpr int kWarps = 4;  ///< warps per thread block of both attention kernels
inline constexpr int kThreads = kWarps * 32;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

/// Online-softmax state of a thread block for NQ heads of dimension D, and the warps' states
/// waiting to be merged into it. Lives in shared memory.
template <int NQ, int D>
struct BlockState {
    float m[NQ], l[NQ];
    float acc[NQ][D];  ///< unnormalised, original space
    float wm[kWarps][NQ], wl[kWarps][NQ];
    float wacc[kWarps][NQ][D];
};

template <int NQ, int D>
__device__ void block_state_init(BlockState<NQ, D>& s) {
    for (int i = threadIdx.x; i < NQ * D; i += blockDim.x) s.acc[i / D][i % D] = 0.0f;
    if (threadIdx.x < NQ) {
        s.m[threadIdx.x] = kNegInf;
        s.l[threadIdx.x] = 0.0f;
    }
}

/// Fold the warps' states (wm, wl, wacc, written by every warp before the call) into the block's.
/// Called by the whole block; synchronises before and after.
template <int NQ, int D>
__device__ void block_merge_warps(BlockState<NQ, D>& s) {
    __syncthreads();
    for (int i = threadIdx.x; i < NQ * D; i += blockDim.x) {
        const int h = i / D, d = i % D;
        float m = s.m[h], l = s.l[h], a = s.acc[h][d];
        for (int w = 0; w < kWarps; ++w) {
            const MergeFactors f = merge_stats(m, l, s.wm[w][h], s.wl[w][h]);
            a = a * f.a + s.wacc[w][h][d] * f.b;
        }
        s.acc[h][d] = a;
    }
    __syncthreads();
    if (threadIdx.x < NQ) {
        const int h = threadIdx.x;
        float m = s.m[h], l = s.l[h];
        for (int w = 0; w < kWarps; ++w) merge_stats(m, l, s.wm[w][h], s.wl[w][h]);
        s.m[h] = m;
        s.l[h] = l;
    }
    __syncthreads();
}

/// Write the block's state as partial `chunk` of (b, kv): heads h < n_q.
template <int NQ, int D>
__device__ void write_partial(const BlockState<NQ, D>& s, int n_q, float* part_ml, float* part_acc,
                              std::int64_t slot /* (b * n_kv_heads + kv) * n_chunks_total + chunk */) {
    for (int i = threadIdx.x; i < n_q * D; i += blockDim.x)
        part_acc[(slot * n_q + i / D) * D + i % D] = s.acc[i / D][i % D];
    if (threadIdx.x < n_q) {
        part_ml[(slot * n_q + threadIdx.x) * 2] = s.m[threadIdx.x];
        part_ml[(slot * n_q + threadIdx.x) * 2 + 1] = s.l[threadIdx.x];
    }
}

/// The GQA group's queries, scaled, into shared memory qs [NQ][D] (zeros past n_q).
template <int NQ, int D>
__device__ void load_scaled_queries(const float* q /* [n_q][D] */, int n_q, float scale, float (&qs)[NQ][D]) {
    for (int i = threadIdx.x; i < NQ * D; i += blockDim.x) qs[i / D][i % D] = i / D < n_q ? q[i] * scale : 0.0f;
}

// ---- f16 rows through a cp.async pipeline ------------------------------------------------------

inline constexpr int kF16Loads = 4;  ///< 16-byte loads per lane per tile, for K and for V
/// Bytes one warp's pipeline stage holds: K and V, kF16Loads 16-byte loads per lane.
inline constexpr int kF16StageBytes = 2 * kF16Loads * 32 * 16;

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

/// Dense f16 rows [r0, r1) of K, V (row stride D) attended by this block: warp w takes tiles
/// w, w + kWarps, ... of kF16Loads * (32 / kLanes) rows; a row is read by kLanes = D / 8 lanes with
/// one 16-byte load each (K and V). The loads go through a cp.async ring of kStages tiles per warp
/// in `stage` (this warp's kStages * kF16StageBytes), kStages - 1 tiles in flight while one is
/// computed; each lane reads back only what it copied, so no barrier is needed. Ends with the
/// warps' states in s.wm/wl/wacc (merge them with block_merge_warps).
template <int NQ, int D, int kStages>
__device__ void attend_f16_rows(const float (&qs)[NQ][D], const std::uint16_t* K, const std::uint16_t* V,
                                std::int64_t r0, std::int64_t r1, BlockState<NQ, D>& s, uint4* stage) {
    static_assert(kStages >= 2, "the ring needs a tile in flight while one is computed");
    constexpr int kLanes = D / 8, kRowsPerLoad = 32 / kLanes, kLoads = kF16Loads, kTileRows = kRowsPerLoad * kLoads;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / kLanes, col = lane % kLanes;
    float q[NQ][8], acc[NQ][8], m[NQ], l[NQ];
#pragma unroll
    for (int h = 0; h < NQ; ++h) {
        m[h] = kNegInf;
        l[h] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            q[h][j] = qs[h][col * 8 + j];
            acc[h][j] = 0.0f;
        }
    }
    const std::int64_t step = std::int64_t(kWarps) * kTileRows;
    std::int64_t next = r0 + std::int64_t(warp) * kTileRows;  // first row of the next tile to copy
    int fill = 0;                                              // its slot
    const auto issue = [&]() {  // copy the next tile (if any) into its slot; always one commit group
        if (next < r1) {
            uint4* slot = stage + fill * (2 * kLoads * 32);
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                const std::int64_t row = next + u * kRowsPerLoad + sub;
                const bool ok = row < r1;
                const std::int64_t at = (ok ? row : r0) * D;
                cp_async_16(slot + u * 32 + lane, reinterpret_cast<const uint4*>(K + at) + col, ok);
                cp_async_16(slot + (kLoads + u) * 32 + lane, reinterpret_cast<const uint4*>(V + at) + col, ok);
            }
        }
        cp_async_commit();
        next += step;
        fill = fill + 1 == kStages ? 0 : fill + 1;
    };
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue();
    int read = 0;
    for (std::int64_t t0 = r0 + std::int64_t(warp) * kTileRows; t0 < r1; t0 += step) {
        cp_async_wait<kStages - 2>();  // this tile's group is complete
        const uint4* slot = stage + read * (2 * kLoads * 32);
        uint4 kr[kLoads], vr[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            kr[u] = slot[u * 32 + lane];
            vr[u] = slot[(kLoads + u) * 32 + lane];
        }
        read = read + 1 == kStages ? 0 : read + 1;
        issue();  // into the slot read in the previous iteration
        float sc[kLoads][NQ];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const __half2* k2 = reinterpret_cast<const __half2*>(&kr[u]);
            float2 kf[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) kf[j] = __half22float2(k2[j]);
#pragma unroll
            for (int h = 0; h < NQ; ++h) {
                float d = 0.0f;
#pragma unroll
                for (int j = 0; j < 4; ++j) d += q[h][2 * j] * kf[j].x + q[h][2 * j + 1] * kf[j].y;
#pragma unroll
                for (int off = kLanes / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
                sc[u][h] = t0 + u * kRowsPerLoad + sub < r1 ? d : kNegInf;
            }
        }
#pragma unroll
        for (int h = 0; h < NQ; ++h) {
            float mx = sc[0][h];
#pragma unroll
            for (int u = 1; u < kLoads; ++u) mx = fmaxf(mx, sc[u][h]);
#pragma unroll
            for (int off = kLanes; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float mn = fmaxf(m[h], mx), alpha = rescale(m[h], mn);
            m[h] = mn;
            l[h] *= alpha;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[h][j] *= alpha;
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                const float p = sc[u][h] == kNegInf ? 0.0f : hd_exp(sc[u][h] - mn);
                l[h] += p;
                const __half2* v2 = reinterpret_cast<const __half2*>(&vr[u]);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float2 vf = __half22float2(v2[j]);
                    acc[h][2 * j] += p * vf.x;
                    acc[h][2 * j + 1] += p * vf.y;
                }
            }
        }
    }
    cp_async_wait<0>();  // only empty groups are left; nothing may land after the stage is reused
    // Sum the row groups of the warp (lanes col, col + kLanes, ...); m is warp-uniform.
#pragma unroll
    for (int h = 0; h < NQ; ++h) {
#pragma unroll
        for (int off = kLanes; off < 32; off <<= 1) {
            l[h] += __shfl_xor_sync(0xffffffffu, l[h], off);
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[h][j] += __shfl_xor_sync(0xffffffffu, acc[h][j], off);
        }
        if (sub == 0) {
#pragma unroll
            for (int j = 0; j < 8; ++j) s.wacc[warp][h][col * 8 + j] = acc[h][j];
            if (col == 0) {
                s.wm[warp][h] = m[h];
                s.wl[warp][h] = l[h];
            }
        }
    }
}

/// Calls launch.template operator()<NQ, D>() (a functor) for the instance serving the shape (group_instance, D 64|128).
template <class Launch>
void dispatch_instance(const AttentionShape& s, const Launch& launch) {
    const int nq = group_instance(s.n_q);
    const auto with_d = [&](auto nq_c) {
        if (s.D == 64)
            launch.template operator()<decltype(nq_c)::value, 64>();
        else
            launch.template operator()<decltype(nq_c)::value, 128>();
    };
    if (nq == 1)
        with_d(std::integral_constant<int, 1>{});
    else if (nq == 2)
        with_d(std::integral_constant<int, 2>{});
    else if (nq == 4)
        with_d(std::integral_constant<int, 4>{});
    else
        with_d(std::integral_constant<int, 8>{});
}

/// out[b][kv * n_q + h] = merge of the n_parts partials of (b, kv, h), normalised.
/// Grid (n_kv_heads * n_q, batch), D threads.
__global__ void combine_partials_kernel(int n_kv_heads, int n_q, int D, int n_parts, const float* part_ml,
                                        const float* part_acc, float* out);

void launch_combine(const AttentionShape& shape, int n_parts, const float* part_ml, const float* part_acc, float* out,
                    cudaStream_t stream);

}  // namespace aqpim::cuda
