// 8-bit score scan over tables interleaved by four heads (scan_f32_8bit_by4): per token and
// subspace, one byte load of the code and one 16-byte load-and-add of the four heads' entries.
// The subspaces go in chunks of 8 across a run of up to 32 blocks, so the chunk's tables
// (8 x 4 KiB) stay in L1 while every token of the run is looked up in them; token by token over
// all subspaces, M = 32 tables (128 KiB) make most lookups miss L1. The run's partial sums wait in
// a 16 KiB buffer [token][4]. Both x86 levels use this kernel (it needs nothing past AVX).

#include <immintrin.h>

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "pq/pq_kernels_isa.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"

namespace aqpim {

namespace {

constexpr int kChunk = 8;                 // subspaces whose tables share L1 (32 KiB)
constexpr std::int64_t kRunBlocks = 32;  // tokens whose sums wait in the buffer: 32 x 32 x 16 B

// sums[t] (+)= Σ_{j < C} tables[j][code(t, m0 + j)] for the run's tokens; `first` starts the sums.
template <int C>
void add_chunk(const float* tables, const std::uint8_t* run, std::size_t block_bytes, std::int64_t n_blocks, bool first,
               float* sums) {
    for (std::int64_t b = 0; b < n_blocks; ++b) {
        const std::uint8_t* codes = run + b * block_bytes;
        float* s = sums + b * kCodeBlock * 4;
        for (int t = 0; t < kCodeBlock; ++t) {
            // two add chains: half the dependent adds per token
            __m128 even = first ? _mm_setzero_ps() : _mm_load_ps(s + 4 * t), odd = _mm_setzero_ps();
            for (int j = 0; j < C; ++j) {
                const __m128 entry = _mm_loadu_ps(tables + (std::int64_t(j) * 256 + codes[j * kCodeBlock + t]) * 4);
                if (j % 2 == 0)
                    even = _mm_add_ps(even, entry);
                else
                    odd = _mm_add_ps(odd, entry);
            }
            _mm_store_ps(s + 4 * t, _mm_add_ps(even, odd));
        }
    }
}

}  // namespace

void scan_f32_8bit_by4_avx2(const float* lut4, int n_q, int M, const std::uint8_t* blocks, std::int64_t n_blocks,
                            float* scores, std::int64_t score_stride) {
    const std::size_t block_bytes = code_block_bytes(M, 8);
    alignas(64) float sums[kRunBlocks * kCodeBlock * 4];
    for (int h0 = 0; h0 < n_q; h0 += 4) {
        const float* group = lut4 + std::int64_t(h0 / 4) * M * 256 * 4;
        const int n_heads = std::min(4, n_q - h0);
        for (std::int64_t b0 = 0; b0 < n_blocks; b0 += kRunBlocks) {
            const std::int64_t nb = std::min(kRunBlocks, n_blocks - b0);
            const std::uint8_t* run = blocks + b0 * block_bytes;
            // The run is read chunk by chunk (strided); the next one comes into L2 meanwhile.
            if (b0 + nb < n_blocks)
                prefetch_l2(run + nb * block_bytes, std::size_t(std::min(kRunBlocks, n_blocks - b0 - nb)) * block_bytes);
            for (int m0 = 0; m0 < M; m0 += kChunk)
                with_count<kChunk>(std::min(kChunk, M - m0), [&](auto C) {
                    add_chunk<C()>(group + std::int64_t(m0) * 256 * 4, run + m0 * kCodeBlock, block_bytes, nb, m0 == 0,
                                   sums);
                });
            for (int j = 0; j < n_heads; ++j) {
                float* out = scores + (h0 + j) * score_stride + b0 * kCodeBlock;
                for (std::int64_t t = 0; t < nb * kCodeBlock; ++t) out[t] = sums[4 * t + j];
            }
        }
    }
}

}  // namespace aqpim
