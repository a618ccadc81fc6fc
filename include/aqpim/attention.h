#pragma once
// Single-KV-head attention for a whole GQA group of query heads: over dense f32/f16 keys and
// values (the reference, and the competitor PQ must beat) and over PQ-coded keys and values
// (lookup-table scores, stable softmax, values accumulated in the code domain). Work shared by the
// group (loading and unpacking codes, converting f16 rows) is done once for all its heads.
//
// Results are AttentionPartial: mergeable flash-decoding state, so a cache made of segments (f16
// sinks, coded pages of several codebook versions, an f16 recent window) attends to each segment
// and merges; finalize() divides by the softmax denominator.
//
// Every call takes the calling thread's Workspace (aqpim/workspace.h) for the tiles, tables and
// accumulators it reuses from call to call; without one (nullptr) it allocates its own and frees it
// on return (right for a single call, slower for a decode loop).

#include <cstdint>
#include <span>
#include <vector>

#include "aqpim/half.h"
#include "aqpim/pq.h"
#include "aqpim/simd.h"
#include "aqpim/workspace.h"

namespace aqpim {

/// Online-softmax state of n_q query heads over the segments seen so far.
struct AttentionPartial {
    int n_q = 0;
    int D = 0;
    std::vector<float> max;  ///< [n_q] largest score seen (-inf when nothing seen)
    std::vector<float> sum;  ///< [n_q] Σ_t exp(s_t - max)
    std::vector<float> acc;  ///< [n_q][D] Σ_t exp(s_t - max) v_t

    AttentionPartial() = default;
    AttentionPartial(int n_q, int D) { reset(n_q, D); }
    void reset(int n_q, int D);
    /// Fold another partial over disjoint tokens into this one (same n_q, D).
    void merge(const AttentionPartial& other);
    /// out [n_q][D] = acc / sum (zeros for a head that saw no token).
    void finalize(float* out) const;
    /// Heap bytes it holds.
    std::size_t bytes() const { return heap_bytes(max) + heap_bytes(sum) + heap_bytes(acc); }
};

/// Heap bytes of partials kept as scratch.
inline std::size_t partials_bytes(const std::vector<AttentionPartial>& partials) {
    std::size_t b = heap_bytes(partials);
    for (const AttentionPartial& p : partials) b += p.bytes();
    return b;
}

// ---- dense reference ------------------------------------------------------------------------------

/// Attend q [n_q][D] (scores are scale * q·k) over K, V [n_tokens][D] (row-major), merging into `part`.
void attend_dense_f32(const float* q, int n_q, int D, const float* K, const float* V, std::int64_t n_tokens,
                      float scale, AttentionPartial& part, Workspace* ws = nullptr);
void attend_dense_f16(const float* q, int n_q, int D, const f16_t* K, const f16_t* V, std::int64_t n_tokens,
                      float scale, AttentionPartial& part, Workspace* ws = nullptr);

// ---- attention on PQ codes --------------------------------------------------------------------------

enum class PqScorePath {
    f32,   ///< exact float tables (vpermps)
    int8,  ///< u8 tables (byte permutes), M <= 256; error bound in docs/pq-kernels.md
    /// int8 where it applies and is the faster scan (M <= 256; 4-bit keys, or 8-bit keys at the
    /// avx512 level), else f32: the KV cache's default, its effect on austen-13m within the
    /// tolerance named in docs/pq-kernels.md ("Int8 tables by default", "8-bit codes with int8 tables")
    automatic,
};
enum class PqValuePath {
    automatic,  ///< the faster one measured for the active SIMD level (see bench pq)
    histogram,  ///< softmax weights into per-subspace histograms, then histogram x codebook
    permute,    ///< codebook columns fetched by register permutes (nbits 4 only)
    pairs,      ///< weights into 256-bin histograms of subspace pairs, folded per subspace once per call (nbits 4 only)
    /// permute with weights and codebook columns rounded to bf16, two tokens per multiply-add
    /// (nbits 4, AVX512-BF16 only); what `automatic` takes with int8 score tables where it can
    bf16,
};
struct PqAttentionOptions {
    PqScorePath scores = PqScorePath::f32;
    PqValuePath values = PqValuePath::automatic;
    /// Codebooks to use instead of the quantizers' own ([M][ksub][dsub] f32 each; null = the
    /// quantizer's): the KV cache keeps f16 codebooks and widens them per call into these, while the
    /// quantizers supply only their transforms.
    const float* k_centroids = nullptr;
    const float* v_centroids = nullptr;
    /// The value codebook as codebook_columns lays it out ([M][dsub][16], nbits 4), for a caller
    /// that attends many query rows with one codebook and builds it once; null = built by each call
    /// that takes the permute path.
    const float* v_columns = nullptr;
};

/// The value path `automatic` resolves to for this nbits and context (tokens of one call) at the
/// active SIMD level; with int8 score tables (an approximate call already) it takes bf16 where the
/// CPU has it. An explicit path the codes or the CPU cannot take is an error naming why.
PqValuePath resolve_value_path(PqValuePath requested, int nbits, std::int64_t n_tokens, bool int8_scores = false);
/// Whether the bf16 value pass can run now: AVX512-BF16 on this CPU and the avx512 kernel level active.
bool bf16_values_here();
/// "automatic", "histogram", "permute", "pairs" or "bf16".
const char* to_string(PqValuePath path);

/// Attend q [n_q][D] (original space) over n_tokens tokens whose keys and values are coded by pq_k
/// and pq_v into blocks (aqpim/pq_codes.h layout, code_blocks_for(n_tokens) blocks each), merging
/// into `part` (values in the original space).
void attend_pq(const float* q, int n_q, const ProductQuantizer& pq_k, const ProductQuantizer& pq_v,
               const std::uint8_t* k_blocks, const std::uint8_t* v_blocks, std::int64_t n_tokens, float scale,
               const PqAttentionOptions& options, AttentionPartial& part, Workspace* ws = nullptr);

/// A run of consecutive tokens whose key and value codes are contiguous blocks (a page of a paged
/// cache). Every span of a call but the last holds whole blocks (n_tokens % 32 == 0).
struct PqCodeSpan {
    const std::uint8_t* k_blocks = nullptr;
    const std::uint8_t* v_blocks = nullptr;
    std::int64_t n_tokens = 0;
};

/// attend_pq over the concatenation of spans coded by one codebook version (pq_k, pq_v): the query
/// transform and lookup tables are built once for the call, then the spans are scanned in tiles of
/// 1024 tokens. A tile made of several spans is first gathered into contiguous buffers of the
/// workspace (the next tile's spans are prefetched meanwhile), so the kernels see the same layout as
/// one span; a span that covers a whole tile is read in place. Bit-identical to attend_pq on the
/// concatenated blocks (same tiles, same kernels).
void attend_pq_spans(const float* q, int n_q, const ProductQuantizer& pq_k, const ProductQuantizer& pq_v,
                     std::span<const PqCodeSpan> spans, float scale, const PqAttentionOptions& options,
                     AttentionPartial& part, Workspace* ws = nullptr);

// ---- kernels (per SIMD level; tests compare each with ref) -----------------------------------------

struct AttnKernels {
    /// scores [n_q][stride] -> p in place: p = exp(s - new_max) for t < n_valid, 0 for t in
    /// [n_valid, n_cols). max/sum [n_q] updated online; alpha[h] = exp(old_max - new_max), the
    /// factor by which accumulators of earlier tokens must be multiplied (1 if unchanged).
    void (*softmax_tile)(float* scores, std::int64_t stride, int n_q, std::int64_t n_valid, std::int64_t n_cols,
                         float* max, float* sum, float* alpha);
    /// scores[h][t] = q[h]·K[t] for t < n_tok; K rows of D values, row stride D.
    void (*dense_scores_f32)(const float* q, int n_q, int D, const float* K, std::int64_t n_tok, float* scores,
                             std::int64_t stride);
    void (*dense_scores_f16)(const float* q, int n_q, int D, const f16_t* K, std::int64_t n_tok, float* scores,
                             std::int64_t stride);
    /// acc[h][:] += Σ_t p[h][t] V[t][:] for t < n_tok.
    void (*dense_values_f32)(const float* p, std::int64_t stride, int n_q, int D, const float* V, std::int64_t n_tok,
                             float* acc);
    void (*dense_values_f16)(const float* p, std::int64_t stride, int n_q, int D, const f16_t* V, std::int64_t n_tok,
                             float* acc);
};
const AttnKernels& attn_kernels(SimdLevel level);

}  // namespace aqpim
