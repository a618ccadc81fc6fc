// AVX2 pair-histogram value path (4-bit codes; docs/pq-kernels.md, "Values without decoding"):
// the codes of subspaces 2p and 2p+1 of a token form one byte, and the weights of four heads (one
// xmm) are added into bin pair_hist[p][byte][:]: one read-modify-write per token and PAIR of
// subspaces, half the histogram path's, and no codeword arithmetic per token (the permute path's
// D * n_q multiply-adds). pair_hist_marginals then folds the 256-bin pair histograms into the
// per-subspace ones once per call.

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"

namespace aqpim {

namespace {

constexpr int kRunBlocks = 32;  // blocks per run: 1024 tokens, one attention tile
constexpr int kChunkGroups = 2;  // groups of 4 subspaces per pass over a run: 4 pair tables, 16 KiB of bins
static_assert(kChunkGroups == 2, "a chunk left short holds one group (add_weights<1>)");

// The token in slot k (0..31) of a group's extracted pair codes (extract_group's order).
constexpr int slot_token(int k) { return (k & 3) + 4 * ((k >> 3) & 1) + 8 * (k >> 4) + 16 * ((k >> 2) & 1); }

/// The 64 bytes of one group (4 subspaces x 32 tokens, aqpim/pq_codes.h) -> out[2k + s] = 16 x the
/// byte code(token, 4g+2s) | code(token, 4g+2s+1) << 4 of the token in slot k: the byte offset of
/// its bin in a 256-bin table of four floats, so that a read-modify-write is one load of the offset,
/// one vaddps and one store, with the table's base and displacement in the addressing mode.
inline void extract_group(const std::uint8_t* group, std::uint16_t* out) {
    const __m256i lo_nib = _mm256_set1_epi16(0x000F), hi_nib = _mm256_set1_epi16(0x00F0);
    for (int half = 0; half < 2; ++half) {
        // 16-bit word 2i + s of the half = bytes (4i + 2s, 4i + 2s + 1): subspaces 4g+2s, 4g+2s+1 of
        // tokens i (low nibbles) and i + 16 (high nibbles).
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32 * half));
        const __m256i w4 = _mm256_srli_epi16(w, 4);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(w, lo_nib), _mm256_and_si256(w4, hi_nib));
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(w4, lo_nib),
                                           _mm256_and_si256(_mm256_srli_epi16(w, 8), hi_nib));
        const __m256i bytes = _mm256_packus_epi16(lo, hi);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * half),
                            _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(bytes)), 4));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * half + 16),
                            _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(bytes, 1)), 4));
    }
}

/// The read-modify-writes of NG groups (2 NG pair tables from `bins`) over nb blocks of a run.
template <int NG>
void add_weights(const float* wt, const std::uint16_t (*codes)[kChunkGroups][64], int nb, float* bins) {
    char* base = reinterpret_cast<char*>(bins);
    for (int b = 0; b < nb; ++b)
        for (int k = 0; k < kCodeBlock; ++k) {
            const __m128 w = _mm_load_ps(wt + (b * kCodeBlock + k) * 4);
            for (int gi = 0; gi < NG; ++gi)
                for (int s = 0; s < 2; ++s) {
                    float* bin = reinterpret_cast<float*>(base + (2 * gi + s) * 256 * 16 + codes[b][gi][2 * k + s]);
                    _mm_storeu_ps(bin, _mm_add_ps(_mm_loadu_ps(bin), w));
                }
        }
}

}  // namespace

void values_pairs_avx2(const float* p, std::int64_t p_stride, int n_q, int M, const std::uint8_t* blocks,
                       std::int64_t n_blocks, float* pair_hist) {
    const int n_groups = (M + 3) / 4, n_pairs = 2 * n_groups;
    const std::size_t block_bytes = code_block_bytes(M, 4);
    alignas(32) float wt[kRunBlocks * kCodeBlock * 4];                    // [block][slot][4 heads]
    alignas(32) std::uint16_t codes[kRunBlocks][kChunkGroups][64];          // a chunk's bin offsets
    for (int hg = 0; hg < (n_q + 3) / 4; ++hg) {
        const int nh = std::min(4, n_q - 4 * hg);
        float* ph = pair_hist + std::int64_t(hg) * n_pairs * 256 * 4;
        for (std::int64_t b0 = 0; b0 < n_blocks; b0 += kRunBlocks) {
            const int nb = int(std::min<std::int64_t>(kRunBlocks, n_blocks - b0));
            // Weights in slot order, four heads per token: slots 4i..4i+3 are four consecutive
            // tokens, so one 4 x 4 transpose per four slots (heads past n_q read zeros).
            for (int b = 0; b < nb; ++b)
                for (int k = 0; k < kCodeBlock; k += 4) {
                    const std::int64_t t = (b0 + b) * kCodeBlock + slot_token(k);
                    __m128 r[4];
                    for (int j = 0; j < 4; ++j) r[j] = j < nh ? _mm_loadu_ps(p + (4 * hg + j) * p_stride + t) : _mm_setzero_ps();
                    _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
                    for (int i = 0; i < 4; ++i) _mm_store_ps(wt + (b * kCodeBlock + k + i) * 4, r[i]);
                }
            for (int g0 = 0; g0 < n_groups; g0 += kChunkGroups) {
                const int ng = std::min(kChunkGroups, n_groups - g0);
                for (int b = 0; b < nb; ++b)
                    for (int gi = 0; gi < ng; ++gi)
                        extract_group(blocks + (b0 + b) * block_bytes + std::size_t(g0 + gi) * 64, codes[b][gi]);
                float* bins = ph + std::int64_t(2 * g0) * 256 * 4;
                if (ng == kChunkGroups)
                    add_weights<kChunkGroups>(wt, codes, nb, bins);
                else
                    add_weights<1>(wt, codes, nb, bins);  // the one group left (kChunkGroups is 2)
            }
        }
    }
}

}  // namespace aqpim
