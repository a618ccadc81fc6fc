#pragma once
// Device building blocks of the two fused PQ attention kernels (pq_attention.cu: value histograms
// in shared memory; pq_attention_mma.cu: value histograms on the tensor cores): staging a code
// block, the group's heads as vector loads, lookup-table scores, building a version's tables,
// the sinks-and-window chunk, and the launch plumbing.

#include <cstddef>

#include "cuda/attention_common.cuh"
#include "cuda/cuda_check.h"
#include "cuda/pq_kernel_families.h"

namespace aqpim::cuda {

inline constexpr int kF16Stages = 2;  ///< cp.async ring of the sinks-and-window block

/// Shared memory (floats) the sinks-and-window block takes: its cp.async ring, then its queries.
__host__ __device__ constexpr int f16_chunk_floats(int nq, int D) { return kWarps * kF16Stages * kF16StageBytes / 4 + nq * D; }

/// 4-aligned count of floats/dwords (16-byte aligned regions).
__host__ __device__ constexpr int up4(int n) { return (n + 3) / 4 * 4; }

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

/// Scores of token `lane` of a staged key block (groups `stride` dwords apart) for the NQ heads:
/// Σ_m LUT[m][code(t, m)][h], one dword of codes read per 4 subspaces, one vector load per
/// subspace for all heads.
template <int NQ>
__device__ __forceinline__ void token_scores(const float* lut, const std::uint32_t* sk, int stride, int lane, int Mk,
                                             float (&s)[NQ]) {
#pragma unroll
    for (int h = 0; h < NQ; ++h) s[h] = 0.0f;
    const int shift = (lane >> 4) << 2;
    for (int g = 0; g * 4 < Mk; ++g) {
        const std::uint32_t dw = sk[g * stride + (lane & 15)] >> shift;
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

/// The codebook view an instance reads: without kRot its rotation is a compile-time null, so the
/// rotation code folds away and the instance compiles as it did before rotations existed.
template <bool kRot>
__device__ __forceinline__ PqCodebookView rotation_if(PqCodebookView v) {
    if constexpr (!kRot) v.rot = nullptr;
    return v;
}

/// Whether a launch reads rotated codebooks (selects the kRot instances).
inline bool has_rotations(const PqAttentionParams& p) { return p.k_rot || p.v_rot; }

/// A version's tables for the group, built by the whole block: the queries moved into the key
/// quantizer's space (qy [NQ][D], zeros past n_q), then LUT[m][c][h] (the heads interleaved).
/// Synchronises before (the previous tables may still be read) and after.
template <int NQ, int D>
__device__ void build_group_tables(const float* q, int n_q, float scale, const PqCodebookView& kcb, int Mk, float* qy,
                                   float* lut) {
    __syncthreads();
    for (int i = threadIdx.x; i < NQ * D; i += blockDim.x)
        qy[i] = i / D < n_q ? query_in_quantizer_space(q + (i / D) * D, kcb, scale, i % D) : 0.0f;
    __syncthreads();
    for (int i = threadIdx.x; i < NQ * Mk * kKsub; i += blockDim.x) {
        const int h = i % NQ, r = i / NQ;  // r = m * 16 + c
        lut[i] = lut_entry(qy + h * D, kcb.cb, D / Mk, r / kKsub, r % kKsub);
    }
    __syncthreads();
}

/// Who a PQ attention block is: grid (n_chunks + 1, n_kv_heads, batch), its partial's slot and its GQA
/// group's queries [n_q][D].
struct PqBlockIds {
    int chunk, kv, b;
    std::int64_t part_slot;
    const float* q;
    __device__ PqBlockIds(const PqAttentionParams& p)
        : chunk(blockIdx.x), kv(blockIdx.y), b(blockIdx.z),
          part_slot((std::int64_t(b) * p.shape.n_kv_heads + kv) * (p.n_chunks + 1) + chunk),
          q(p.q + (std::int64_t(b) * p.shape.n_kv_heads + kv) * p.shape.n_q * p.shape.D) {}
    /// Block n_chunks attends the f16 rows; the others the coded pages.
    __device__ bool f16_block(const PqAttentionParams& p) const { return chunk == p.n_chunks; }
};

/// The block that attends the f16 sinks and window of (b, kv) and writes its partial.
template <int NQ, int D>
__device__ void attend_f16_chunk(const PqAttentionParams& p, const float* q, int b, int kv, std::int64_t part_slot,
                                 BlockState<NQ, D>& st, float4* dyn4) {
    float* dyn = reinterpret_cast<float*>(dyn4);
    float (&qs)[NQ][D] = *reinterpret_cast<float(*)[NQ][D]>(dyn + kWarps * kF16Stages * kF16StageBytes / 4);
    load_scaled_queries(q, p.shape.n_q, p.shape.scale, qs);
    __syncthreads();
    const std::int64_t base = (std::int64_t(b) * p.shape.n_kv_heads + kv) * p.max_f16 * D;
    const int warp = threadIdx.x >> 5;
    attend_f16_rows<NQ, D, kF16Stages>(qs, p.k16 + base, p.v16 + base, 0, p.n_f16[b], st,
                                       reinterpret_cast<uint4*>(dyn4) + warp * (kF16Stages * kF16StageBytes / 16));
    block_merge_warps(st);
    write_partial(st, p.shape.n_q, p.part_ml, p.part_acc, part_slot);
}

/// Launch a PQ attention kernel over grid (n_chunks + 1, n_kv_heads, batch) with `bytes` of dynamic
/// shared memory.
template <class Kernel>
void launch_pq_kernel(Kernel* kernel, std::size_t bytes, const PqAttentionParams& p, cudaStream_t stream) {
    AQPIM_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    const dim3 grid(p.n_chunks + 1, p.shape.n_kv_heads, p.shape.batch);
    kernel<<<grid, kThreads, bytes, stream>>>(p);
    AQPIM_CUDA_LAUNCHED();
}

/// Launch and occupancy of a PQ kernel family through dispatch_instance. Family has
/// `template <int NQ, int D> static Kernel* kernel(const PqAttentionParams&)` (the instance serving
/// p) and `static std::size_t smem_bytes(int nq, int D, const PqAttentionParams&)`.
template <class Family>
struct PqFamilyLaunch {
    const PqAttentionParams& p;
    cudaStream_t stream;
    template <int NQ, int D>
    void operator()() const { launch_pq_kernel(Family::template kernel<NQ, D>(p), Family::smem_bytes(NQ, D, p), p, stream); }
};
template <class Family>
struct PqFamilyOccupancy {
    const PqAttentionParams& p;
    int& blocks;
    template <int NQ, int D>
    void operator()() const {
        const std::size_t bytes = Family::smem_bytes(NQ, D, p);
        auto* kernel = Family::template kernel<NQ, D>(p);
        AQPIM_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
        AQPIM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, bytes));
    }
};

/// A kernel family's launch, shared memory and occupancy, for the instance serving each launch.
template <class Family>
PqKernelFamily family_of() {
    return {[](const PqAttentionParams& p, cudaStream_t stream) { dispatch_instance(p.shape, PqFamilyLaunch<Family>{p, stream}); },
            [](const PqAttentionParams& p) { return Family::smem_bytes(group_instance(p.shape.n_q), p.shape.D, p); },
            [](const PqAttentionParams& p) {
                int blocks = 0;
                dispatch_instance(p.shape, PqFamilyOccupancy<Family>{p, blocks});
                return blocks;
            }};
}

/// The end of a coded block: flush what the last version added (if any page was attended) and
/// write the block's partial.
template <int NQ, int D, class Flush>
__device__ __forceinline__ void finish_coded_block(bool attended, const Flush& flush, const BlockState<NQ, D>& st,
                                   const PqAttentionParams& p, std::int64_t part_slot) {
    if (attended)
        flush();
    else
        __syncthreads();  // a chunk without pages: the initialised state is written as is
    write_partial(st, p.shape.n_q, p.part_ml, p.part_acc, part_slot);
}

}  // namespace aqpim::cuda
