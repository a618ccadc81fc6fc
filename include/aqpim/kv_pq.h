#pragma once
// The adaptive product-quantization KV cache (`--kv pq:...`, design and figures in docs/kv-pq.md).
//
// Per sequence, per layer and per KV head, keys and values get their own ProductQuantizer, learned
// online from the sequence's own tokens: tokens stay f16 until `calib` tokens exist, then the
// layer's quantizers (every KV head, K and V) are trained in one batched call and the tokens are
// encoded. Every `refresh` coded tokens a new codebook version starts: it learns from its own first
// calib - sinks tokens (held f16 until then) and codes every later token; older tokens keep the
// version that coded them. At `versions` versions the refresh stops (the newest serves every later
// token). The first `sinks` tokens and the last `window` tokens are attended in f16, layers named in
// `f16_layers` are dense f16, and `bits=B` chooses m per layer and for K vs V from calibration error
// so that everything held stays within B bits per element at the stated context.
//
// Codes live in fixed-size pages of `page` tokens (a multiple of the 32-token code block) from one
// PagePool shared by the sequences: page k of a sequence holds coded tokens [k*page, (k+1)*page) of
// every coded layer and KV head (keys and values). Attention builds the lookup tables once per
// codebook version in use and scans that version's pages (aqpim/attention.h attend_pq_spans), then
// merges the f16 sinks and window.
//
// Token positions: a sequence's tokens t < sinks are sinks; token t >= sinks has coded index
// i = t - sinks. With k = n - sinks coded-eligible tokens after n appends, a row at position p reads
// coded indices [0, coded(p + 1)) from codes and everything after from f16 (PqSchedule, below), which
// depends on p only: batched prefill equals token-by-token decode exactly.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/attention.h"
#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/pq.h"

namespace aqpim {

/// How attention reads coded tokens.
/// How a PQ cache stores its trained centroids (pq:cb=).
enum class CodebookStorage {
    f32,   ///< as trained
    f16,   ///< rounded to f16: half the bytes
    int8,  ///< int8 with one f32 scale per dimension (max |centroid| / 127): about 0.3 of the bytes
};

enum class PqAttendMode {
    codes,   ///< lookup-table scores and values in the code domain (the fast path)
    decode,  ///< decode the codes to f32 rows, then dense attention (reference and fallback)
};

/// Run parameters of the PQ cache, as `pq:key=value,...` names them (defaults in brackets).
struct PqKvParams {
    int m = 32;          ///< m: subspaces of keys and values [32]
    int k_m = 0;         ///< k_m / v_m: subspaces of keys / values [m]
    int v_m = 0;
    int nbits = 4;       ///< nbits: bits per sub-code, 4 or 8 [4]
    int calib = 256;     ///< calib: tokens (sinks included) before the first codebooks exist [256]
    int refresh = 512;   ///< refresh: coded tokens per codebook version, 0 = never refresh [512]
    int versions = 8;    ///< versions: most codebook versions per layer and sequence [8]
    int sinks = 4;       ///< sinks: first tokens kept f16 [4]
    int window = 64;     ///< window: last tokens kept f16 [64]
    std::vector<int> f16_layers;  ///< f16_layers: layers kept dense f16 ("0+1+4-7") [none]
    double bits = 0;     ///< bits: target bits/element, all overheads counted (0 = fixed m) [0]
    std::int64_t ctx = 0;  ///< ctx: context bits= is stated at (0 = KvCacheOptions::context) [0]
    /// v_weight: weight of value error against key error when bits= allocates (chosen on
    /// austen-13m by KL divergence, docs/kv-pq.md) [4]
    double v_weight = 4;
    /// aniso: weight of the error of each key's score against a query along itself, beside its
    /// squared distance, when keys are coded (pq/anisotropic_codes.h; 0 = nearest centroid) [0]
    double aniso = 0;
    int page = 256;      ///< page: tokens per page, a multiple of 32 [256]
    /// pairs: RoPE pair layout of the keys, model|none|interleaved|neox [model = KvShape::rope_pairs]
    bool pairs_from_model = true;
    RopePairs pairs = RopePairs::none;
    SubspaceOrder order = SubspaceOrder::variance_balanced;  ///< order: balanced|contiguous [balanced]
    Rotation rotation = Rotation::none;  ///< rotation: none|hadamard|random, keys and values [none]
    bool k_scale = true;   ///< k_scale: key scale folding 0|1 [1]
    bool v_scale = false;  ///< v_scale: value scale folding 0|1 [0]
    /// aug: copies of each key calibration token rotated by RoPE to random later positions (the
    /// post-RoPE key distribution drifts with position; see docs/kv-pq.md), -1 = 3 when the pair
    /// layout and frequencies are known, else 0 [-1]
    int aug = -1;
    /// rope_theta: RoPE base giving the pair frequencies theta^(-2i/head_dim) when the shape has
    /// none (KvShape::rope_inv_freq) [0 = the shape's]
    double rope_theta = 0;
    int iters = 25;        ///< iters: k-means iterations at most [25]
    /// trials: k-means++ draws per seed, the best kept: 0 = 2 + ln k (greedy), 1 = plain
    /// k-means++: codebooks about as fast to train at 4 bits, 1.4-1.7x faster at 8 bits, SSE
    /// 1.6% / 10% higher [0]
    int trials = 0;
    std::uint64_t seed = 1234;  ///< seed: k-means and rotation seed [1234]
    PqAttendMode attn = PqAttendMode::codes;  ///< attn: codes|decode [codes]
    /// scores: f32|int8|auto (int8: nbits 4, m <= 256; auto: int8 where it applies, else f32) [auto]
    PqScorePath scores = PqScorePath::automatic;
    /// values: auto|histogram|permute|pairs|bf16, the value pass (bf16: nbits 4, AVX512-BF16; auto:
    /// bf16 with int8 score tables where the CPU has it, else the fastest exact pass) [auto]
    PqValuePath values = PqValuePath::automatic;
    /// cb: codebook storage, f32|f16|int8: f16 halves the codebooks' bytes, int8 (one f32 scale per
    /// dimension) takes (ksub + 4) / (4 ksub) of them; centroids are rounded once trained (every code
    /// and table uses the rounded ones) and widened to f32 per call; int8 the default since
    /// 2026-12-05: 20% fewer bytes at 8K, KL within 0.5% of f32 on held-out text (docs/kv-pq.md) [int8]
    CodebookStorage codebooks = CodebookStorage::int8;
    /// wq: storage of the window and of tokens waiting for a codebook version, f16|q8_0|q4_0|int8|int4
    /// (q8_0/q4_0: llama.cpp blocks, head_dim a multiple of 32; int8/int4: groups of gcd(32, head_dim)
    /// with f16 scale and min). Sinks stay f16. [f16]
    std::string window_type = "f16";

    /// Every key pq accepts (src/kv/pq_keys.cpp holds the table of keys).
    static const std::vector<std::string>& keys();
    /// The table of keys as markdown (key, type, values, default, meaning): `aqpim info --pq-keys`
    /// prints it and docs/kv-pq.md carries it (a test checks they agree).
    static std::string key_listing();
    /// The names wq= accepts.
    static const std::vector<std::string>& window_types();
    /// Parse and validate a `pq` spec for a model's KV shape: unknown keys and bad values are an
    /// aqpim::Error naming them. With bits= and a context (ctx=, else `context`), the keys the spec
    /// leaves open that cost bits (wq, window, calib, sinks, nbits, cb, refresh) are solved for the
    /// budget (src/kv/pq_budget_solver.h; docs/kv-pq.md, "The bits= solver").
    static PqKvParams from_spec(const KvSchemeSpec& spec, const KvShape& shape, std::int64_t context = 0);
    /// Check the parameters against a shape (from_spec calls it).
    void validate(const KvShape& shape) const;
    /// The spec text: "pq" and every key that differs from its default, in keys() order.
    std::string to_string() const;

    int key_m() const { return k_m > 0 ? k_m : m; }
    int value_m() const { return v_m > 0 ? v_m : m; }
    RopePairs key_pairs(const KvShape& shape) const { return pairs_from_model ? shape.rope_pairs : pairs; }
    /// Per-pair RoPE frequencies [head_dim/2]: from rope_theta when given, else the shape's (may be empty).
    std::vector<float> key_inv_freq(const KvShape& shape) const;
    /// Rotated copies per key calibration token (aug resolved).
    int key_augment(const KvShape& shape) const;
    bool is_f16_layer(int il) const;
};

/// The PQ cache. `options.memory_budget` bounds every byte memory() counts (an append that would
/// exceed it throws aqpim::Error naming the budget and the need, and changes nothing);
/// `options.context` is the context bits= is stated at (when the spec has no ctx=).
std::unique_ptr<KvCache> make_pq_kv_cache(const PqKvParams& params, const KvShape& shape,
                                          const KvCacheOptions& options = {});
std::unique_ptr<KvCache> make_pq_kv_cache(const KvSchemeSpec& spec, const KvShape& shape,
                                          const KvCacheOptions& options = {});

/// The subspaces bits= chose for one sequence: k_m[il][ih] / v_m[il][ih] for coded layer il and KV
/// head ih; a layer's lists are empty where it is dense f16 or not calibrated yet.
struct PqAllocation {
    std::vector<std::vector<int>> k_m, v_m;  ///< [n_layer][n_kv_head or 0]
    bool operator==(const PqAllocation&) const = default;
};

/// The allocation of sequence seq_id of a PQ cache. Throws aqpim::Error naming the reason when
/// `cache` is not a PQ cache or holds no such sequence.
PqAllocation pq_allocation(const KvCache& cache, int seq_id);

/// A bits= cache whose layers take their m from `pinned` (where a layer's lists are not empty)
/// instead of choosing them from calibration error; the codebooks are trained as for any choice.
/// The attention-weight probes of `eval --fidelity` use it: their runs pass other values than the
/// main run, and with the main run's m they hold the same bytes and the same key codebooks.
/// A pinned layer that does not fit the page width left to it is an aqpim::Error at calibration.
std::unique_ptr<KvCache> make_pq_kv_cache(const PqKvParams& params, const KvShape& shape,
                                          const KvCacheOptions& options, PqAllocation pinned);

/// One layer of one sequence of a PQ cache as a decode step at its last position reads it, in the
/// cache's own layout: what the CUDA kernels' launch needs (aqpim/cuda_pq.h builds the launch's
/// problem from views; docs/cuda.md). Page pointers point into the cache: valid until its next
/// append or removal of the sequence.
struct PqLayerReadView {
    int nbits = 4, page_tokens = 0, head_dim = 0;
    std::size_t page_bytes = 0;                     ///< bytes of one code page
    std::int64_t n_coded = 0;                       ///< coded indices [0, n_coded) are read from codes
    std::vector<const std::uint8_t*> pages;         ///< code page k: coded indices [k * page, (k + 1) * page)
    std::vector<int> page_version;                  ///< the codebook version that coded page k
    std::vector<std::size_t> k_off, v_off;          ///< [n_kv_heads] the head's key / value blocks in a page (empty
                                                    ///< before the first codebooks)
    std::vector<std::vector<ProductQuantizer>> k, v;  ///< [version][n_kv_heads] (cb=f16: centroids widened)
    std::int64_t n_f16 = 0;                         ///< rows read in f16: the sinks, then the tail
    std::vector<std::vector<std::uint16_t>> f16_k, f16_v;  ///< [n_kv_heads] of [n_f16][head_dim] f16 bits
};

/// The view of layer il of sequence seq_id (one version per page: refresh is a multiple of page).
/// Throws aqpim::Error naming the reason when `cache` is not a PQ cache, the layer is dense f16, the
/// sequence holds no token, or the tail is stored other than as f16 (wq=).
PqLayerReadView pq_layer_read_view(const KvCache& cache, int seq_id, int il);

// ---- schedule: which tokens are coded, by which version --------------------------------------------

/// Pure functions of token counts; the cache and its accounting both use them. k counts
/// coded-eligible tokens (k = n - sinks), i a coded index.
struct PqSchedule {
    std::int64_t sinks = 0, window = 0;
    std::int64_t n_train = 1;   ///< tokens each version learns from: calib - sinks
    std::int64_t refresh = 0;   ///< version j starts at coded index j * refresh (0: one version)
    int versions = 1;

    PqSchedule() = default;
    explicit PqSchedule(const PqKvParams& p);

    std::int64_t version_start(int j) const { return std::int64_t(j) * refresh; }
    /// End (exclusive) of version j's coded indices below `limit`: the next version's start, or
    /// `limit` for the last version.
    std::int64_t version_end(int j, std::int64_t limit) const {
        return j + 1 < versions ? std::min(limit, version_start(j + 1)) : limit;
    }
    /// Version that codes coded index i.
    int version_of(std::int64_t i) const;
    /// Versions whose range has begun when k tokens are coded-eligible (at least 1).
    int versions_started(std::int64_t k) const;
    /// Versions trained when k tokens are coded-eligible (version j trains when k reaches
    /// version_start(j) + n_train).
    int versions_trained(std::int64_t k) const;
    /// Coded index below which tokens may be coded (every earlier token's version is trained).
    std::int64_t trained_limit(std::int64_t k) const;
    /// Coded indices [0, coded(n)) that a row at position n - 1 reads from codes:
    /// max(0, min(k - window, trained_limit(k))) with k = n - sinks (0 when n <= sinks).
    std::int64_t coded(std::int64_t n) const;
};

// ---- accounting and capacity --------------------------------------------------------------------

/// Bytes one sequence of n tokens holds (every layer at n), by part, as memory() reports them:
/// "codes", "page slack", "codebooks", "f16 sinks", "f16 window", "f16 pre-calibration",
/// "dense f16 layers". Codebook bytes are predicted from the parameters (the sections of
/// docs/pq-format.md), counting a permutation unless the plan is the identity by construction. With
/// bits=, the page width comes from the target at `context` (the spec's ctx= first) and "codes"
/// counts that width: a sequence whose allocation uses less of it reports the rest as page slack
/// (same total).
KvMemory pq_sequence_footprint(const PqKvParams& params, const KvShape& shape, std::int64_t n_tokens,
                               std::int64_t context = 0);

/// How many sequences of seq_len tokens fit in `budget` bytes under a pq spec (for `aqpim info`).
struct PqCapacity {
    KvMemory per_sequence;          ///< footprint of one sequence of seq_len tokens
    std::uint64_t peak_bytes = 0;   ///< most bytes one sequence holds on its way to seq_len tokens
    std::int64_t peak_at = 0;       ///< ... when it holds that many tokens (f16 pre-calibration rows peak)
    std::int64_t n_sequences = 0;   ///< floor(budget / peak_bytes): fit whatever order they grow in
    std::int64_t code_pages = 0;    ///< code pages one sequence of seq_len tokens holds
    std::size_t code_page_bytes = 0;
    double bits_per_element = 0;    ///< per_sequence at seq_len
};
/// Exact page arithmetic: sequences share one pool but never share pages, so each needs its own
/// footprint, and a sequence can hold more on its way to seq_len than at seq_len (its tokens stay
/// f16 until calib, and a refresh version's first tokens until it trains): n_sequences counts the
/// peak. `options.context` (or the spec's ctx=) states bits= (default: seq_len).
PqCapacity pq_capacity(const KvSchemeSpec& spec, const KvShape& shape, std::int64_t seq_len, std::uint64_t budget,
                       const KvCacheOptions& options = {});

}  // namespace aqpim
