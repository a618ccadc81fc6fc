// AVX512-BF16 value pass (PqValuePath::bf16): the register-permute pass (pq_kernels_avx512.cpp)
// with two tokens per multiply-add. `vdpbf16ps` adds a·b over each dword's two bf16 halves into an
// f32 lane, so dword i of a block holds tokens i and i+16 (the pair a 4-bit group's dword already
// packs): the weights as [p(i), p(i+16)] bf16 pairs, built once per tile, and the values by one
// `vpermw` of the column (16 centroids in bf16, written twice so that index bit 4, which the
// neighbouring nibble fills, reads the same entry). Per token and 4 heads at D = 128: 4 permutes
// and 16 multiply-adds where the f32 pass issues 8 and 32. Weights and centroids are rounded to
// bf16 (8 significant bits; sums stay f32): docs/pq-kernels.md "bf16 values" gives the error.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/code_groups.h"
#include "pq/pq_kernels_isa.h"
#include "simd/avx512_util.h"
#include "simd/static_dispatch.h"

namespace aqpim {

namespace {

constexpr int kHeadsPerPass = 4;  // NQ x ND = 16 accumulators + 4 columns + indices in 32 registers
constexpr std::int64_t kChunkBlocks = 32;  // blocks whose paired weights are built, then used, at a time

inline __m512i as_i(__m512bh x) { return (__m512i)x; }
inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

/// pw[b][h] = the block's weights of head h as 32 bf16: word 2i = p(token i), word 2i+1 = p(token i+16).
template <int NQ>
void pair_weights(const float* p, std::int64_t p_stride, std::int64_t n_blocks, std::uint16_t* pw) {
    // cvtne2ps gives words 0-15 = tokens 0-15 and 16-31 = tokens 16-31; interleave them.
    alignas(64) std::uint16_t order[32];
    for (int k = 0; k < 32; ++k) order[k] = std::uint16_t((k & 1) ? 16 + k / 2 : k / 2);
    const __m512i interleave = _mm512_load_si512(order);
    for (std::int64_t b = 0; b < n_blocks; ++b)
        for (int h = 0; h < NQ; ++h) {
            const float* ph = p + h * p_stride + b * kCodeBlock;
            const __m512bh w = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(ph + 16), _mm512_loadu_ps(ph));
            _mm512_store_si512(pw + (b * NQ + h) * 32, _mm512_permutexvar_epi16(interleave, as_i(w)));
        }
}

/// One subspace's ND dims (ND <= 4) for NQ heads over every block.
template <int NQ, int ND, int J>
void values_bf16_dims(const std::uint16_t* pw, const std::uint8_t* group0, std::size_t block_bytes, std::int64_t n_blocks,
                      const float* columns, float* out, int D) {
    __m512 acc[NQ][ND];
    __m512i column[ND];
    for (int j = 0; j < ND; ++j) {
        const __m256bh c = _mm512_cvtneps_pbh(_mm512_loadu_ps(columns + j * 16));
        const __m256i ci = (__m256i)c;
        column[j] = _mm512_inserti64x4(_mm512_castsi256_si512(ci), ci, 1);
        for (int h = 0; h < NQ; ++h) acc[h][j] = _mm512_setzero_ps();
    }
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        // Dword i: byte J = code(i) | code(i + 16) << 4. Word 2i takes bits 0-4 (code(i), bit 4
        // from code(i + 16)); word 2i+1, from x << 12, bits 4-8 (code(i + 16), bit 8 from the next
        // byte). vpermw reads bits 0-4; the doubled column makes bit 4 irrelevant.
        const __m512i d = _mm512_loadu_si512(group0 + b * block_bytes);
        const __m512i x = J == 0 ? d : _mm512_srli_epi32(d, 8 * J);
        const __m512i idx = _mm512_mask_blend_epi16(__mmask32(0xAAAAAAAAu), x, _mm512_slli_epi32(x, 12));
        for (int j = 0; j < ND; ++j) {
            const __m512bh v = as_bh(_mm512_permutexvar_epi16(idx, column[j]));
            for (int h = 0; h < NQ; ++h)
                acc[h][j] = _mm512_dpbf16_ps(acc[h][j], as_bh(_mm512_load_si512(pw + (b * NQ + h) * 32)), v);
        }
    }
    add_lane_sums<NQ, ND>(acc, out, D);
}

}  // namespace

void values_bf16_avx512(const float* p, std::int64_t p_stride, int n_q, int M, int dsub, const std::uint8_t* blocks,
                        std::int64_t n_blocks, const float* columns, float* out) {
    const int D = M * dsub;
    const std::size_t block_bytes = code_block_bytes(M, 4);
    // The weights of up to kChunkBlocks blocks at a time (an attention tile's 32 blocks, 8 KiB), on the stack.
    alignas(64) std::uint16_t pw[kChunkBlocks * kHeadsPerPass * 32];  // [block][NQ][32]
    for_head_groups<kHeadsPerPass>(n_q, [&](auto NQ, int h0) {
        for (std::int64_t b0 = 0; b0 < n_blocks; b0 += kChunkBlocks) {
            const std::int64_t nb = std::min(kChunkBlocks, n_blocks - b0);
            const std::uint8_t* chunk = blocks + b0 * std::int64_t(block_bytes);
            pair_weights<NQ()>(p + h0 * p_stride + b0 * kCodeBlock, p_stride, nb, pw);
            // Subspace-outer, as the f32 pass: one subspace's accumulators stay in registers while the
            // chunk's blocks (codes and paired weights in L1/L2) stream by.
            for (int g = 0; g < (M + 3) / 4; ++g)
                for_subspaces_in_group(std::min(4, M - 4 * g), [&](auto J) {
                    const int m = 4 * g + J();
                    for (int d = 0; d < dsub; d += 4)
                        with_count<4>(std::min(4, dsub - d), [&](auto ND) {
                            values_bf16_dims<NQ(), ND(), J()>(pw, chunk + g * 64, block_bytes, nb,
                                                              columns + (std::int64_t(m) * dsub + d) * 16,
                                                              out + std::int64_t(h0) * D + m * dsub + d, D);
                        });
                });
        }
    });
}

}  // namespace aqpim
