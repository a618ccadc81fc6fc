#pragma once
// Per-lane arithmetic of the PQ kernel's tensor-core value path (pq_attention_mma.cu), shared with
// the CPU tests, which emulate the warp's mma.sync on it.
//
// For each value subspace m, a warp keeps the group's histogram transposed, H_m[c][h] (16 codes x
// 8 heads, the group padded to 8), as the f32 accumulator of mma.sync.m16n8k16 (f16 inputs):
//     H_m += OneHot_m^T (16 codes x 16 tokens) * W (16 tokens x 8 heads)
// where OneHot_m[t][c] = [code(t, m) == c] is built in registers from the staged codes and W holds
// the tokens' softmax weights, rounded to f16. The MMA's k index (tokens) may be any permutation of
// the block's tokens, as long as A and B agree; it is chosen so that each lane's pairs of tokens
// sit in one code dword: k-step ks (0, 1) of a 32-token block, lane (g = lane / 4, q = lane % 4),
//     k = 2q + hi      ->  token i + 16 hi,  i = 8 ks + q        (A regs 0, 1; B reg 0)
//     k = 8 + 2q + hi  ->  token i + 16 hi,  i = 8 ks + 4 + q    (A regs 2, 3; B reg 1)
// so A's pair of tokens is the low and high nibble of one byte of dword i (code4's layout).
// Fragment layouts (PTX ISA, mma.m16n8k16, .f16 A/B, .f32 C): A reg r holds rows g + 8 (r & 1),
// columns 2q + 8 (r >> 1) + {0, 1}; B reg r rows 2q + 8 r + {0, 1}, column g; C element e rows
// g + 8 (e >> 1), column 2q + (e & 1). The low 16 bits of a register hold the lower index.

#include <cstdint>

#include "cuda/pq_tile.h"

namespace aqpim::cuda {

inline constexpr int kMmaHeads = 8;        ///< n of the MMA: the GQA group, padded (groups of up to 8)
inline constexpr int kMmaGroupDwords = 20;  ///< a staged 4-subspace group: 16 dwords padded to 16 bytes
                                            ///< more, so cp.async copies whole 16-byte chunks
inline constexpr int kWeightKStride = 72;  ///< dwords between the weight fragments of two k-steps
                                           ///< (64 + 8: the two k-steps' stores hit distinct banks)
inline constexpr int kWeightBlockDwords = 2 * kWeightKStride;  ///< one 32-token block's weight fragments

/// Where dword i of a block (memory layout) is staged: groups kMmaGroupDwords apart.
AQPIM_HD int mma_staged_dword(int i) { return (i / kGroupDwords) * kMmaGroupDwords + i % kGroupDwords; }

/// Staged dword (block-local index 0..15 within a group) holding lane q's token pair `half` of k-step ks.
AQPIM_HD int mma_token_dword(int ks, int half, int q) { return 8 * ks + 4 * half + q; }

/// f16 bits of 1024 + c, for a code c in 0..15 (exact: the code is the mantissa's low bits).
inline constexpr std::uint32_t kCodeHalfBase = 0x6400u;

/// The two codes of subspace byte j of a code dword (tokens i and i + 16) as f16x2 (1024 + code):
/// the token i in the low half.
AQPIM_HD std::uint32_t code_pair_h2(std::uint32_t dword, int j) {
#if defined(__CUDA_ARCH__)
    const std::uint32_t x = __byte_perm(dword, 0u, 0x4440u + unsigned(j));  // byte j alone
#else
    const std::uint32_t x = (dword >> (8 * j)) & 0xFFu;
#endif
    return ((x * 0x1001u) & 0x000F000Fu) | (kCodeHalfBase * 0x10001u);  // lo -> bits 0-3, hi -> 16-19
}

/// f16x2 one-hot of a code pair against row (code) r: each half 1.0 where the code equals r, else 0.
AQPIM_HD std::uint32_t onehot_h2(std::uint32_t codes_h2, int r) {
    const std::uint32_t row = (kCodeHalfBase | std::uint32_t(r)) * 0x10001u;
#if defined(__CUDA_ARCH__)
    const __half2 eq = __heq2(*reinterpret_cast<const __half2*>(&codes_h2), *reinterpret_cast<const __half2*>(&row));
    return *reinterpret_cast<const std::uint32_t*>(&eq);
#else
    const std::uint32_t lo = (codes_h2 & 0xFFFFu) == (row & 0xFFFFu) ? 0x3C00u : 0u;
    const std::uint32_t hi = (codes_h2 >> 16) == (row >> 16) ? 0x3C000000u : 0u;
    return lo | hi;
#endif
}

/// A fragment (OneHot^T, codes x tokens) of subspace byte j of a group, k-step ks, lane (g, q),
/// from the group's two staged dwords that lane reads: d0 = mma_token_dword(ks, 0, q), d1 = (ks, 1, q).
AQPIM_HD void onehot_fragment_from(std::uint32_t d0, std::uint32_t d1, int j, int g, std::uint32_t (&a)[4]) {
    const std::uint32_t c0 = code_pair_h2(d0, j), c1 = code_pair_h2(d1, j);
    a[0] = onehot_h2(c0, g);
    a[1] = onehot_h2(c0, g + 8);
    a[2] = onehot_h2(c1, g);
    a[3] = onehot_h2(c1, g + 8);
}

/// The same for subspace m of a staged block (groups kMmaGroupDwords apart).
AQPIM_HD void onehot_fragment(const std::uint32_t* staged, int m, int ks, int g, int q, std::uint32_t (&a)[4]) {
    const std::uint32_t* grp = staged + (m >> 2) * kMmaGroupDwords;
    onehot_fragment_from(grp[mma_token_dword(ks, 0, q)], grp[mma_token_dword(ks, 1, q)], m & 3, g, a);
}

/// Where token t (0..31) of a block puts its f16 weight for head h in the block's weight fragments
/// (kWeightBlockDwords dwords read as B fragments): the index of the 16-bit half.
AQPIM_HD int weight_half_index(int t, int h) {
    const int i = t & 15, hi = t >> 4, ks = i >> 3, half = (i >> 2) & 1, q = i & 3;
    const int lane = h * 4 + q;  // the lane whose B column (g) is h and whose pair holds token t
    return 2 * (ks * kWeightKStride + lane * 2 + half) + hi;
}

/// The dword of lane's B reg 0 for k-step ks (reg 1 follows it).
AQPIM_HD int weight_fragment_dword(int ks, int lane) { return ks * kWeightKStride + lane * 2; }

/// f32 -> f16 bits, round to nearest even.
AQPIM_HD std::uint16_t hd_float_to_half(float x) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(x));
#else
    return f32_to_fp16_scalar(x);
#endif
}

/// Softmax weights (<= 1) enter the MMA scaled by 2^15, so that weights down to 2^-29 stay normal
/// f16 numbers (relative error <= 2^-11) instead of subnormals, and the largest, 32768, stays
/// below f16's 65504; the histograms are scaled back by the exact 2^-15 at the flush.
inline constexpr float kWeightScale = 32768.0f;
inline constexpr float kWeightUnscale = 1.0f / kWeightScale;

/// A weight as the MMA's f16 input (scaled by kWeightScale).
AQPIM_HD std::uint16_t weight_to_half(float p) { return hd_float_to_half(p * kWeightScale); }
/// The weight that input stands for (what the histogram adds up), for the softmax sums.
AQPIM_HD float weight_from_half(std::uint16_t h) { return hd_half_to_float(h) * kWeightUnscale; }

/// Code (row) and head (column) of accumulator element e (0..3) of lane (g, q).
AQPIM_HD int acc_code(int g, int e) { return g + 8 * (e >> 1); }
AQPIM_HD int acc_head(int q, int e) { return 2 * q + (e & 1); }

}  // namespace aqpim::cuda
