#pragma once
// llama.cpp's quantized block layouts (ggml-common.h), the activation format the integer dot
// kernels use, and the per-level kernel entry points of src/model/quant*.cpp. See docs/weights.md.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "aqpim/aligned.h"
#include "aqpim/ggml_types.h"
#include "aqpim/half.h"
#include "aqpim/weights.h"
#include "aqpim/workspace.h"

namespace aqpim::quant {

inline constexpr int QK = 32;    ///< values per block of Q8_0 / Q4_0, and per activation block
inline constexpr int QK_K = 256; ///< values per super-block of Q4_K / Q6_K

// ---- weight blocks (byte-exact GGUF layouts) ---------------------------------------------------

/// Q8_0: value[i] = d * qs[i].
struct BlockQ8_0 {
    f16_t d;
    std::int8_t qs[QK];
};
/// Q4_0: value[i] = d * ((qs[i] & 15) - 8), value[i + 16] = d * ((qs[i] >> 4) - 8), i < 16.
struct BlockQ4_0 {
    f16_t d;
    std::uint8_t qs[QK / 2];
};
/// Q4_K: 8 sub-blocks of 32 values; sub-block j has a 6-bit scale sc_j and 6-bit min m_j packed
/// in `scales` (see unpack_q4k_scales); value = d * sc_j * q - dmin * m_j, q a nibble. qs holds
/// 4 chunks of 32 bytes: chunk c's low nibbles are sub-block 2c, its high nibbles sub-block 2c+1.
struct BlockQ4_K {
    f16_t d;
    f16_t dmin;
    std::uint8_t scales[12];
    std::uint8_t qs[QK_K / 2];
};
/// Q6_K: 16 groups of 16 values with int8 scales; value = d * scales[g] * (q - 32), q 6 bits:
/// for half h (128 values) and l < 32, values l, l+32, l+64, l+96 of the half take the low
/// nibble of ql[64h+l], low of ql[64h+l+32], high of ql[64h+l], high of ql[64h+l+32], and bits
/// 0-1, 2-3, 4-5, 6-7 of qh[32h+l] as their top two bits.
struct BlockQ6_K {
    std::uint8_t ql[QK_K / 2];
    std::uint8_t qh[QK_K / 4];
    std::int8_t scales[QK_K / 16];
    f16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210);

/// Q4_K's 12 scale bytes -> sc[8], m[8] (6 bits each; llama.cpp's get_scale_min_k4): bytes 0-3
/// hold sc 0-3 (low 6 bits) and the top 2 bits of sc 4-7; bytes 4-7 the same for the mins;
/// bytes 8-11 the low nibbles of sc 4-7 (low) and m 4-7 (high).
inline void unpack_q4k_scales(const std::uint8_t* s, std::uint8_t* sc, std::uint8_t* m) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = std::uint8_t((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
        m[j + 4] = std::uint8_t((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/// The same unpacking on 64-bit words, for SIMD kernels: returns sc[0..7] in the bytes of `lo`
/// and m[0..7] in the bytes of `hi` (no byte stores, so they go straight into a register).
inline void unpack_q4k_scales_words(const std::uint8_t* s, std::uint64_t& lo, std::uint64_t& hi) {
    std::uint64_t a;  // bytes 0-7: sc0-3 / m0-3 in the low 6 bits, top bits of sc4-7 / m4-7 in bits 6-7
    std::uint32_t b;  // bytes 8-11: low nibbles of sc4-7, m4-7
    std::memcpy(&a, s, 8);
    std::memcpy(&b, s + 8, 4);
    const std::uint64_t top = (a >> 6) & 0x0303030303030303ull;  // the 2-bit tops, in place of each byte
#if defined(__GNUC__)
    asm("" : "+r"(a), "+r"(b));  // keeps GCC's SLP vectorizer from moving this to xmm registers
#endif
    lo = (a & 0x3f3f3f3full) | (std::uint64_t((b & 0x0f0f0f0fu) | std::uint32_t(top << 4)) << 32);
    hi = ((a >> 32) & 0x3f3f3f3full) | (std::uint64_t(((b >> 4) & 0x0f0f0f0fu) | std::uint32_t((top >> 32) << 4)) << 32);
}

/// Kernels prefetch the weight stream this far ahead (as the read roof, aqpim::read_bytes, does):
/// one sequential stream per thread is not enough for the hardware prefetcher alone to keep DRAM
/// busy.
inline constexpr std::size_t kWeightPrefetchBytes = 4096;

// ---- activations for the integer dot kernels ---------------------------------------------------

/// x (f32, n values) quantized per block of 32 for the integer dot products:
/// xq[i] = nearbyint(x[i] / d[b]) with d[b] = max|x in block b| / 127 (ties to even; the f32
/// scale is kept exact, not rounded to f16). The product of a row with x is then the product of
/// the dequantized row with the dequantized x, computed with exact integer block sums.
/// `d`, `s`, `s16` are in natural order for every level; `q` is natural for ref and avx2, and in
/// the type's register order for avx512 (which also fills `lane`, `lane_i` and `aux`; see
/// quant_avx512.cpp).
struct QuantizedX {
    std::int64_t n = 0;
    AlignedBuffer<std::int8_t> q;       ///< [n] int8 values, in the level's layout for the type
    AlignedBuffer<float> d;             ///< [n / 32] block scales
    AlignedBuffer<std::int32_t> s;      ///< [n / 32] sum of each block's int8 values
    AlignedBuffer<std::int32_t> s16;    ///< [n / 16] sum of each half block's int8 values
    AlignedBuffer<float> lane;          ///< avx512: block scale of each 4-value dot lane, kernel order
    AlignedBuffer<std::int32_t> lane_i; ///< avx512: integer start value of each dot lane (Q8_0, Q4_0)
    AlignedBuffer<float> aux;           ///< avx512: per-type correction terms
};

using aqpim::heap_bytes;
/// Heap bytes a QuantizedX holds.
inline std::size_t heap_bytes(const QuantizedX& x) {
    return heap_bytes(x.q) + heap_bytes(x.d) + heap_bytes(x.s) + heap_bytes(x.s16) + heap_bytes(x.lane) +
           heap_bytes(x.lane_i) + heap_bytes(x.aux);
}

/// A Workspace part: the products' buffers (matvec's prepared activation; matmul's prepared
/// activations on its calling thread, and each thread's dequantized rows and packed panels).
struct MatmulScratch {
    QuantizedX qx;                    ///< matvec's x, prepared for the type's kernel
    std::vector<QuantizedX> qxs;      ///< [n] matmul_rows' activations, prepared
    AlignedBuffer<float> rows, panel; ///< matmul_own: a panel's rows dequantized, then packed k-major
    AlignedBuffer<f16_t> half_panel;  ///< matmul_own: an f16 panel packed as it is
    AlignedBuffer<float> tile;        ///< matmul_sgemm: a tile of rows dequantized
    AlignedBuffer<float> saved;       ///< matmul_rows: dot_rows_batch's accumulators between chunks

    std::size_t bytes() const {
        std::size_t b = heap_bytes(qx) + heap_bytes(qxs) + heap_bytes(rows) + heap_bytes(panel) +
                        heap_bytes(half_panel) + heap_bytes(tile) + heap_bytes(saved);
        for (const QuantizedX& x : qxs) b += heap_bytes(x);
        return b;
    }
};

/// Quantize x into natural-order q, d, s and s16 (the specification every level reproduces
/// exactly); grows the buffers as needed.
void quantize_x_ref(const float* x, std::int64_t n, QuantizedX& qx);
/// Sizes q, d, s, s16 (and lane, lane_i, aux when `lanes`) for n values; sets qx.n.
void reserve_x(QuantizedX& qx, std::int64_t n, bool lanes);

// ---- per-level kernels ---------------------------------------------------------------------------

/// The row-batch products' blocks (dot_rows_batch, dot_rows_invariant): `rows` rows x
/// `activations` activations at once, `sums` 16-lane accumulators per output, over chunks of
/// kBatchChunk values (a multiple of dot_float's 64-value step).
struct BatchBlocks {  ///< dot_rows_batch: dot_float's four accumulators (matvec's arithmetic)
    static constexpr int rows = 2, activations = 3, sums = 4;
};
struct InvariantBlocks {  ///< dot_rows_invariant: one accumulator per output
    static constexpr int rows = 4, activations = 6, sums = 1;
    /// Up to few_activations activations go few_rows rows at a time where those rows hold at most
    /// kFewRowsBlockBytes (more weight streams and FMA chains for a lone decode row, half the blocks
    /// to set up: austen-13m's rows of 1-2.8 KB; on rows of 8 KB a lone row ran at 0.7x of 4-row
    /// blocks); the saved floats of the larger blocks cover them (8 x 2 / 8 <= 4 x 6 / 4 a row).
    static constexpr int few_rows = 8, few_activations = 2;
    static constexpr std::size_t kFewRowsBlockBytes = std::size_t(32) << 10;
    static_assert(few_activations <= activations, "the saved accumulators are sized by the larger blocks");
};
/// dot_rows_invariant at the AVX2 level: 8-lane accumulators in 16 registers (rows x activations
/// sums, `rows` weight vectors and one x vector live at once). matmul sizes the saved accumulators
/// by InvariantBlocks (at least 6 x 16 floats a row): a block of these holds at most that many, so
/// they fit for any number of rows, the last partial block included.
struct InvariantBlocksAvx2 {
    static constexpr int rows = 4, activations = 2;
    static constexpr int few_rows = 8, few_activations = 1;
    static_assert(rows * activations * 8 <= InvariantBlocks::activations * 16 &&
                      few_rows * few_activations * 8 <= InvariantBlocks::activations * 16,
                  "a block's saved floats fit what batch_saved_floats<InvariantBlocks> gives one row");
};
/// dot_rows_batch_quantized (matvec's arithmetic): Q8_0 and Q4_0 in blocks of `rows` rows with two
/// accumulators per output, Q4_K and Q6_K of `super_rows` rows with five; the saved floats are sized
/// for the larger (`sums` = 5 vectors per output of a `rows`-row block).
struct QuantBatchBlocks {
    static constexpr int rows = 2, super_rows = 1, activations = 4, sums = 5;
    static_assert(super_rows <= rows, "the saved accumulators are sized by the larger blocks");
};
/// dot_rows_batch_quantized at the AVX2 level (Q8_0 and Q4_0: blocks of 32 values, two 8-lane
/// accumulators per output, 16 for a block of 2 rows x 4 activations: measured on 4096 x 4096, one
/// thread, Q8_0 / Q4_0 batch 8, 87-93 / 77-80 GFLOP/s, against 66-91 / 57-71 at 1 x 4, 85 / 72 at
/// 2 x 3, 78 / 63 at 3 x 2, 69 / 52 at 4 x 1); its saved floats fit what QuantBatchBlocks sizes.
struct QuantBatchBlocksAvx2 {
    static constexpr int rows = 2, activations = 4;
    /// Q4_K / Q6_K: super-blocks, 32 saved floats an output (three vectors and a scalar).
    static constexpr int super_rows = 1, super_activations = 4;
    static_assert(rows * activations * 2 * 8 <= QuantBatchBlocks::rows * QuantBatchBlocks::activations *
                                                     QuantBatchBlocks::sums * 16 &&
                      super_rows * super_activations * 32 * QuantBatchBlocks::rows <=
                          QuantBatchBlocks::rows * QuantBatchBlocks::activations * QuantBatchBlocks::sums * 16,
                  "a block's saved floats fit what batch_saved_floats<QuantBatchBlocks> gives its rows");
};
constexpr std::int64_t kBatchChunk = 1024;
/// Floats of the saved accumulators for n_rows rows (48 KiB at 64 rows for BatchBlocks, 24 KiB
/// for InvariantBlocks, 80 KiB for QuantBatchBlocks).
template <class B>
inline std::size_t batch_saved_floats(std::int64_t n_rows) {
    return std::size_t((n_rows + B::rows - 1) / B::rows) * B::rows * B::activations * B::sums * 16;
}

/// Everything a level provides. Quantized types run on QuantizedX; F32/F16/BF16 on f32 x.
struct QuantKernels {
    /// n values of a quantized type (Q8_0, Q4_0, Q4_K, Q6_K) -> f32.
    void (*dequantize)(GgmlType type, const void* src, float* dst, std::int64_t n);
    /// Fill qx for rows of `type` (the level's layout), from x of n values.
    void (*prepare_x)(GgmlType type, const float* x, std::int64_t n, QuantizedX& qx);
    /// y[r] = row r · x for r < n_rows; rows of `cols` values, `row_bytes` apart.
    void (*dot_rows)(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                     std::int64_t cols, const float* x, const QuantizedX& qx, float* y);
    /// F32/F16/BF16 only, null where the level has none: Y[i * ldy + r] = row r . X[i] for the
    /// n_x rows of X (cols values each, contiguous), every output bit-identical to dot_rows'. saved:
    /// the caller's scratch of batch_saved_floats<BatchBlocks>(n_rows) floats, 64-byte aligned (the
    /// accumulators kept between chunks of kBatchChunk values; unread when cols <= kBatchChunk).
    void (*dot_rows_batch)(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                           std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                           float* saved) = nullptr;
    /// As dot_rows_batch, with the invariant products' arithmetic instead of dot_rows': each output
    /// sums 16 values per step in one 16-lane accumulator, then reduces it, whatever n_x and
    /// whichever block it is in, so a row of X gets the same bits in a batch of 1 or of 64 (the
    /// server's decode, MatmulPath::invariant) at GEMM-like speed from a few rows up. saved:
    /// batch_saved_floats<InvariantBlocks>(n_rows) floats, 64-byte aligned.
    void (*dot_rows_invariant)(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                               std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                               float* saved) = nullptr;
    /// Null where the level has none; for the types batches_quantized(type) takes: as dot_rows_batch
    /// for activations prepared by prepare_x (X[0..n_x)), every output bit-identical to dot_rows'.
    /// saved: batch_saved_floats<QuantBatchBlocks>(n_rows) floats, 64-byte aligned.
    void (*dot_rows_batch_quantized)(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                                     std::int64_t cols, const QuantizedX* X, std::int64_t n_x, float* Y,
                                     std::int64_t ldy, float* saved) = nullptr;
    /// Activations one block of dot_rows_invariant takes at this level (InvariantBlocks or
    /// InvariantBlocksAvx2): up to this many read each weight row once, more pass over it again.
    int invariant_block_activations = 0;

    /// Whether this level's dot_rows_batch_quantized takes rows of `type` (every quantized type
    /// where the level has the kernel).
    bool batches_quantized(GgmlType type) const;
};


#define AQPIM_DECLARE_QUANT_KERNELS(isa)                                                                  \
    void dequantize_##isa(GgmlType type, const void* src, float* dst, std::int64_t n);                    \
    void prepare_x_##isa(GgmlType type, const float* x, std::int64_t n, QuantizedX& qx);                  \
    void dot_rows_##isa(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows, \
                        std::int64_t cols, const float* x, const QuantizedX& qx, float* y);

AQPIM_DECLARE_QUANT_KERNELS(ref)
AQPIM_DECLARE_QUANT_KERNELS(avx2)
AQPIM_DECLARE_QUANT_KERNELS(avx512)
void dot_rows_batch_avx512(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                           std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy, float* saved);
void dot_rows_batch_quantized_avx512(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                                     std::int64_t cols, const QuantizedX* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                                     float* saved);
void dot_rows_batch_quantized_avx2(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                                   std::int64_t cols, const QuantizedX* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                                   float* saved);
void dot_rows_invariant_avx2(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                             std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                             float* saved);
void dot_rows_invariant_avx512(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                               std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                               float* saved);

#undef AQPIM_DECLARE_QUANT_KERNELS

const QuantKernels& quant_kernels(SimdLevel level);

/// True for the types whose products quantize x (Q8_0, Q4_0, Q4_K, Q6_K).
inline bool quantizes_x(GgmlType t) {
    return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::Q6_K;
}
inline bool QuantKernels::batches_quantized(GgmlType type) const {
    return dot_rows_batch_quantized != nullptr && quantizes_x(type);
}

// ---- shared by matvec and matmul (quant.cpp) --------------------------------------------------

/// Throws aqpim::Error unless W's type is supported and its shape consistent.
void check_matrix(const WeightMatrix& W, const char* what);
/// Threads matvec uses for W (at most n_threads; 1 for small matrices).
int matvec_threads(const WeightMatrix& W, int n_threads);
/// matvec with x already prepared (qx filled by the active level's prepare_x when the type
/// quantizes x), rows split into `nt` contiguous chunks.
void matvec_prepared(const WeightMatrix& W, const float* x, const QuantizedX& qx, float* y, int nt);

/// matmul's own f32 GEMM (AVX-512): W rows are dequantized 32 at a time and packed k-major into
/// a panel [K][32]; then Y[i][0..n_cols) = X[i] . panel columns for every activation row i.
inline constexpr int kPanelRows = 32;
void pack_panel_avx512(const float* rows, int n_rows, std::int64_t K, float* panel);
/// pack_panel_avx512 for f16 rows into an f16 panel (16-bit transposes, half the shuffles and
/// bytes of the f32 panel); the f16 gemm_panel_avx512 widens it as it loads.
void pack_panel_f16_avx512(const f16_t* rows, int n_rows, std::int64_t K, f16_t* panel);
/// `next` (optional): the W bytes the caller packs next, requested into L2 line by line across the
/// product, so that the next pack finds them there instead of waiting on DRAM.
void gemm_panel_avx512(const float* X, std::int64_t n, std::int64_t K, const float* panel, int n_cols, float* Y,
                       std::int64_t ldy, const void* next = nullptr, std::size_t next_bytes = 0);
void gemm_panel_avx512(const float* X, std::int64_t n, std::int64_t K, const f16_t* panel, int n_cols, float* Y,
                       std::int64_t ldy, const void* next = nullptr, std::size_t next_bytes = 0);

/// How matmul computes. automatic: automatic_path(type, n). rows / sgemm / own / invariant force a
/// path, for tests and benchmarks. invariant: a row of X gets the same bits
/// whatever n (the server's decode): dot_rows_invariant where the level has it for W's type,
/// else `rows` (matvec's arithmetic for every row, slower from a few rows up).
enum class MatmulPath { automatic, rows, sgemm, own, invariant };
/// Smallest batch matmul dequantizes W for at the active SIMD level (the measured crossover with
/// the rows path, W [4096 x 4096] in the LLC, one thread: 4 for f32/f16/bf16, 8 for Q8_0, 12 for
/// Q4_0/Q4_K/Q6_K; at AVX2, whose GEMM is OpenBLAS's sgemm on dequantized tiles, kAvx2QuantRowsBatch
/// and kAvx2Q6KRowsBatch for the types its row-batch kernel takes).
std::int64_t gemm_min_batch(GgmlType type);
/// At AVX2, Q8_0, Q4_0 and Q4_K stay on the rows path (dot_rows_batch_quantized_avx2) below this
/// batch: 4096 x 4096, one / two threads, Q8_0 measured 65-79 / 131-148 GFLOP/s at 8 against sgemm's
/// 35-36 / 66-68, 59-67 / 145-169 at 32 against 69 / 137, 66-67 / 155-172 at 64 against 82-84 /
/// 162-164; Q4_K 92-94 / 157-178 at 8-64 against 30-78 / 61-147.
inline constexpr std::int64_t kAvx2QuantRowsBatch = 64;
/// Q6_K's crossover at AVX2: rows 50-53 / 77-99 GFLOP/s at 8-64 against sgemm's 31 / 57 at 8, 49 /
/// 82 at 16, 63 / 118 at 32.
inline constexpr std::int64_t kAvx2Q6KRowsBatch = 24;
/// Largest batch the automatic path gives the invariant kernel (float W with it): from 2 to 16 rows
/// it beat both the rows path and the panel GEMM; at 32 it ties the GEMM, which wins from 64 up.
inline constexpr std::int64_t kInvariantMaxBatch = 16;
/// The path `automatic` takes for n activations of a W of `type` at the active SIMD level: rows for
/// one activation (matvec itself), invariant for float W up to kInvariantMaxBatch where the level
/// has its kernel, rows below gemm_min_batch(type), else own (sgemm below AVX-512).
MatmulPath automatic_path(GgmlType type, std::int64_t n);
void matmul_with(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads, MatmulPath path,
                 ThreadWorkspaces* ws = nullptr);

}  // namespace aqpim::quant
