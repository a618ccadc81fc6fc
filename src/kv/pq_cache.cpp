// The adaptive PQ KV cache: f16 sinks, coded pages per codebook version, f16 window and
// pre-calibration tokens, dense f16 layers (design: docs/kv-pq.md).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "aqpim/aligned.h"
#include "aqpim/attention.h"
#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/kmeans.h"
#include "aqpim/kv_pq.h"
#include "aqpim/page_pool.h"
#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "aqpim/threads.h"
#include "kv/kv_state_io.h"
#include "kv/pq_codebooks.h"
#include "kv/pq_layout.h"
#include "kv/pq_state.h"
#include "pq/anisotropic_codes.h"
#include "simd/prefetch.h"

namespace aqpim {

namespace kv {
namespace {

constexpr float kF16Max = 65504.0f;

/// The first of x[0, n) that is not a finite f16 value (|x| > 65504 or NaN), or -1: one pass
/// without early exit (it vectorizes), then the search only when one is there.
std::int64_t first_outside_f16(const float* x, std::int64_t n) {
    bool bad = false;
    for (std::int64_t i = 0; i < n; ++i) bad |= !(std::fabs(x[i]) <= kF16Max);
    if (!bad) return -1;
    for (std::int64_t i = 0; i < n; ++i)
        if (!(std::fabs(x[i]) <= kF16Max)) return i;
    return -1;
}

/// Blocks of the next codebook version's codes a decode call requests into L2 while it scans the
/// current version: one tile of the scan (1024 tokens, 32 KiB at M = 32 for keys and values).
constexpr std::int64_t kNextVersionPrefetchBlocks = 32;
constexpr double kAugSpanUnknownContext = 4096;  // positions the last version's key rotations reach when no context is stated
/// append() encodes in tasks of this many positions of one stream (a multiple of kCodeBlock)...
constexpr std::int64_t kEncodeBlockTokens = 64;
/// ...side by side on the pool's threads from this many rows (positions x streams) in one call: a
/// decode step's one or two tokens are cheaper than waking a thread.
constexpr std::int64_t kParallelAppendRows = 64;
static_assert(kEncodeBlockTokens % kCodeBlock == 0);

/// Rows of one stream (a layer's keys or values of one KV head) for positions [first, end), stored as
/// f16 or, with wq=, as a scalar row codec; contiguous; rows are appended at the end and dropped at
/// the front (amortised O(1)).
class TailRows {
public:
    void init(int D, std::int64_t first, const std::optional<RowCodec>& codec) {
        D_ = D;
        first_ = first;
        codec_ = codec;
        row_bytes_ = codec ? codec->row_bytes() : std::size_t(D) * sizeof(f16_t);
    }
    std::int64_t first() const { return first_; }
    std::int64_t end() const { return first_ + n_; }
    bool is_f16() const { return !codec_; }
    /// The f16 row at pos (f16 storage only).
    const f16_t* f16_row(std::int64_t pos) const {
        AQPIM_ASSERT(is_f16());
        return reinterpret_cast<const f16_t*>(at(pos));
    }
    /// Rows [pos, pos + n) as f32 [n][D].
    void read(std::int64_t pos, std::int64_t n, float* out) const {
        AQPIM_ASSERT(pos >= first_ && pos + n <= end());
        if (codec_)
            codec_->decode(at(pos), n, out);
        else
            fp16_to_f32(f16_row(pos), out, std::size_t(n) * D_);
    }

    /// Append n rows at end(): row i from src + i * stride (f32, rounded to f16 or coded).
    void push(const float* src, std::int64_t n, std::int64_t stride) {
        reserve(n);
        std::uint8_t* dst = buf_.data() + std::size_t(off_ + n_) * row_bytes_;
        if (codec_)
            codec_->encode(src, n, stride, dst);
        else
            for (std::int64_t i = 0; i < n; ++i)
                f32_to_fp16(src + i * stride, reinterpret_cast<f16_t*>(dst) + i * D_, std::size_t(D_));
        n_ += n;
    }
    /// Forget rows before pos. A buffer grown for a long prefill shrinks once its rows are coded:
    /// only the rows it holds count in memory(), so only those may stay allocated (within 4x).
    void drop_before(std::int64_t pos) {
        const std::int64_t d = std::clamp<std::int64_t>(pos - first_, 0, n_);
        first_ += d;
        off_ += d;
        n_ -= d;
        if (n_ == 0) off_ = 0;
        const std::int64_t floor = std::max<std::int64_t>(n_, 64);
        if (capacity() > 4 * floor) reallocate(2 * floor);
    }

    // kv state (save_sequence / restore_sequence): the rows as stored
    std::size_t row_bytes() const { return row_bytes_; }
    /// The stored bytes of the rows from pos on, [end() - pos][row_bytes()].
    const std::uint8_t* stored_rows(std::int64_t pos) const { return at(pos); }
    /// Append n rows given as stored bytes [n][row_bytes()].
    void push_stored(const std::uint8_t* rows, std::int64_t n) {
        if (n == 0) return;  // no rows: the buffer may still be empty (memcpy of a null pointer is UB)
        reserve(n);
        std::memcpy(buf_.data() + std::size_t(off_ + n_) * row_bytes_, rows, std::size_t(n) * row_bytes_);
        n_ += n;
    }

private:
    const std::uint8_t* at(std::int64_t pos) const { return buf_.data() + std::size_t(off_ + (pos - first_)) * row_bytes_; }
    std::int64_t capacity() const { return std::int64_t(buf_.size() / std::max<std::size_t>(row_bytes_, 1)); }
    void reserve(std::int64_t more) {
        const std::int64_t cap = capacity();
        if (off_ + n_ + more <= cap) return;
        if (n_ + more <= cap / 2) {  // room at the front: slide down
            std::memmove(buf_.data(), buf_.data() + std::size_t(off_) * row_bytes_, std::size_t(n_) * row_bytes_);
            off_ = 0;
            return;
        }
        reallocate(std::max<std::int64_t>(2 * (n_ + more), 64));
    }
    /// A buffer of `rows` rows holding the live rows at its front.
    void reallocate(std::int64_t rows) {
        AlignedBuffer<std::uint8_t> next(std::size_t(rows) * row_bytes_);
        if (n_ > 0) std::memcpy(next.data(), buf_.data() + std::size_t(off_) * row_bytes_, std::size_t(n_) * row_bytes_);
        buf_ = std::move(next);
        off_ = 0;
    }

    int D_ = 0;
    std::optional<RowCodec> codec_;  ///< none: f16 rows
    std::size_t row_bytes_ = 0;
    std::int64_t first_ = 0, n_ = 0, off_ = 0;  ///< rows [first_, first_ + n_) at buf_ row off_
    AlignedBuffer<std::uint8_t> buf_;
};

/// One layer of one sequence.
struct LayerState {
    std::int64_t n = 0;  ///< tokens appended
    // coded layers
    std::vector<AlignedBuffer<f16_t>> sink_k, sink_v;  ///< [n_kv] of [sinks][D]
    std::vector<TailRows> tail_k, tail_v;              ///< [n_kv] rows from sinks on not (yet) read as codes
    std::vector<PqLayerVersion> versions;              ///< trained codebook versions, oldest first
    std::uint64_t codebook_bytes = 0;                  ///< Σ versions' parameter_bytes() (add_version)
    std::vector<int> Mk, Mv;                           ///< [n_kv] subspaces, set when version 0 is trained
    std::vector<std::size_t> k_off, v_off;             ///< [n_kv] byte offset of the head's codes in a code page
    std::size_t token_bytes = 0;                       ///< code bytes of one token over the layer's heads
};

/// Appends a trained (counted-only) version and its bytes: memory(), called on every forward pass,
/// then sums one number per layer instead of every version's quantizers.
void add_version(LayerState& l, PqLayerVersion v) {
    l.codebook_bytes += v.parameter_bytes();
    l.versions.push_back(std::move(v));
}

struct Sequence {
    std::vector<LayerState> layers;
    std::vector<std::int32_t> code_pages;   ///< page k: coded indices [k * page, (k + 1) * page)
    std::vector<std::int32_t> dense_pages;  ///< page k: positions [k * page, (k + 1) * page) of the f16 layers
    std::size_t assigned = 0;               ///< page width given to calibrated layers (bytes per token)
    int n_calibrated = 0;
    std::int64_t n_max = 0;                 ///< most tokens any layer holds
};

/// What every row of one attend() call reads of one codebook version, prepared once per call.
struct VersionTables {
    std::vector<float> k_centroids, v_centroids;  ///< [M][ksub][dsub] widened (cb=f16/int8; empty for f32)
    std::vector<float> v_columns;                 ///< [Mv][dsub][16] codebook_columns of the values (empty: per row)
    PqAttentionOptions options;                   ///< the cache's options pointing at the above
};

/// Per-thread scratch of attend() (no allocation once warm).
struct AttendScratch {
    AttentionPartial part;
    std::vector<PqCodeSpan> spans, next_spans;  ///< the codes of the version read, of the next one
    std::vector<std::uint8_t> codes;
    std::vector<float> k, v;              ///< decoded rows (attn=decode)
    std::vector<float> tail_k, tail_v;    ///< [rows][D] the call's wq= tail rows widened once
    std::vector<VersionTables> versions;  ///< [versions the call reads]
};
AttendScratch& attend_scratch() {
    thread_local AttendScratch s;
    return s;
}

/// Per-thread scratch of the encode tasks of append() (a block of tokens at a time: small).
struct EncodeScratch {
    std::vector<float> rows;             ///< [tokens][D] the stream's rows read back
    std::vector<std::uint8_t> codes;     ///< [tokens][M]
    AlignedBuffer<float> y;              ///< ProductQuantizer::encode_with's rows in quantizer space
    std::vector<float> wide_centroids;   ///< cb=f16/int8: the quantizer's codebooks widened
    std::vector<float> norms;            ///< their squared norms
};
EncodeScratch& encode_scratch() {
    thread_local EncodeScratch s;
    return s;
}

class PqKvCache final : public KvCache {
public:
    PqKvCache(const PqKvParams& params, const KvShape& shape, const KvCacheOptions& options,
              PqAllocation pinned = {})
        : KvCache(shape),
          p_(params),
          L_(make_pq_layout(params, shape, options.context)),
          budget_(options.memory_budget),
          pinned_(std::move(pinned)) {
        if (L_.n_coded_layers > 0) code_pool_ = std::make_unique<PagePool>(L_.code_page_bytes);
        if (L_.n_dense_layers > 0) dense_pool_ = std::make_unique<PagePool>(L_.dense_page_bytes);
        attn_opts_.scores = p_.scores;
        attn_opts_.values = p_.values;
        aug_copies_ = p_.key_augment(shape);
        inv_freq_ = p_.key_inv_freq(shape);
        aug_context_ = p_.ctx > 0 ? p_.ctx : options.context;
        window_codec_ = pq_window_codec(p_, shape);
    }

    ~PqKvCache() override {
        for (auto& [id, s] : seqs_) release_pages(s);
    }

    std::string scheme() const override { return p_.to_string(); }

    void add_sequence(int seq_id) override {
        AQPIM_CHECK(seq_id >= 0, "kv cache {}: sequence id {} must be non-negative", scheme(), seq_id);
        AQPIM_CHECK(!has_sequence(seq_id), "kv cache {}: sequence {} already exists", scheme(), seq_id);
        Sequence& s = seqs_[seq_id];
        s.layers.resize(shape().n_layer);
        const int n_kv = shape().n_kv_head, D = shape().head_dim;
        for (int il = 0; il < shape().n_layer; ++il) {
            if (L_.dense[il]) continue;
            LayerState& l = s.layers[il];
            l.sink_k.resize(n_kv);
            l.sink_v.resize(n_kv);
            l.tail_k.resize(n_kv);
            l.tail_v.resize(n_kv);
            for (int ih = 0; ih < n_kv; ++ih) {  // sink rows are allocated as they arrive (append)
                l.tail_k[ih].init(D, p_.sinks, window_codec_);
                l.tail_v[ih].init(D, p_.sinks, window_codec_);
            }
        }
    }

    void remove_sequence(int seq_id) override {
        auto it = seqs_.find(seq_id);
        AQPIM_CHECK(it != seqs_.end(), "kv cache {}: no sequence {}", scheme(), seq_id);
        release_pages(it->second);
        seqs_.erase(it);
    }

    bool has_sequence(int seq_id) const override { return seqs_.count(seq_id) != 0; }

    std::int64_t n_tokens(int seq_id, int il) const override { return layer(seq_id, il).n; }

    void append(int il, int seq_id, std::int64_t n, const float* k, const float* v) override;
    void attend(int il, int seq_id, int ih, const KvQuery& query) const override;
    KvMemory memory() const override;
    std::uint64_t sequence_bytes(std::int64_t n_tokens) const override { return footprint(n_tokens); }
    /// pq_layer_read_view (aqpim/kv_pq.h): layer il of sequence seq_id as a decode step reads it.
    PqLayerReadView read_view(int seq_id, int il) const;
    /// pq_allocation (aqpim/kv_pq.h).
    PqAllocation allocation(int seq_id) const {
        const Sequence& s = sequence(seq_id);
        PqAllocation a;
        for (const LayerState& l : s.layers) a.k_m.push_back(l.Mk), a.v_m.push_back(l.Mv);
        return a;
    }
    /// Section "pq" of docs/kv-state.md.
    void save_sequence(int seq_id, ByteWriter& out) const override;
    void restore_sequence(int seq_id, ByteReader& in) override;
    /// Sinks, then coded runs split at version and page boundaries, then the f16 tail (window and
    /// tokens waiting for their version); a dense f16 layer is one span.
    std::vector<KvSpan> layout(int seq_id, int il) const override {
        const LayerState& l = layer(seq_id, il);
        if (L_.dense[il]) return {KvSpan{0, l.n, -1, -1}};
        std::vector<KvSpan> out;
        const std::int64_t S = std::min<std::int64_t>(p_.sinks, l.n), c = L_.sched.coded(l.n);
        if (S > 0) out.push_back({0, S, -1, -1});
        for (std::int64_t i = 0; i < c;) {
            const int j = L_.sched.version_of(i);
            std::int64_t b = std::min<std::int64_t>(c, (i / p_.page + 1) * p_.page);
            if (j + 1 < L_.sched.versions) b = std::min(b, L_.sched.version_start(j + 1));
            out.push_back({S + i, b - i, j, i / p_.page});
            i = b;
        }
        if (S + c < l.n) out.push_back({S + c, l.n - S - c, -1, -1});
        return out;
    }

private:
    const Sequence& sequence(int seq_id) const {
        auto it = seqs_.find(seq_id);
        AQPIM_CHECK(it != seqs_.end(), "kv cache {}: no sequence {}", scheme(), seq_id);
        return it->second;
    }
    const LayerState& layer(int seq_id, int il) const {
        AQPIM_CHECK(il >= 0 && il < shape().n_layer, "kv cache {}: layer {} out of range [0, {})", scheme(), il,
                    shape().n_layer);
        return sequence(seq_id).layers[il];
    }
    void release_pages(Sequence& s) {
        for (std::int32_t id : s.code_pages) code_pool_->release(id);
        for (std::int32_t id : s.dense_pages) dense_pool_->release(id);
        s.code_pages.clear();
        s.dense_pages.clear();
    }

    std::uint64_t free_pool_bytes() const {
        std::uint64_t b = 0;
        if (code_pool_) b += std::uint64_t(code_pool_->n_free()) * code_pool_->page_bytes();
        if (dense_pool_) b += std::uint64_t(dense_pool_->n_free()) * dense_pool_->page_bytes();
        return b;
    }
    std::uint64_t footprint(std::int64_t n) const { return pq_footprint_parts(p_, shape(), L_, n).total(); }

    /// Refuse (aqpim::Error, nothing changed) when growing sequence s to n1 tokens would hold more
    /// than the budget. Every layer's growth is reserved when the first layer reaches n1.
    void charge(const Sequence& s, int seq_id, int il, std::int64_t n_new, std::int64_t n1) const;

    void train_version(Sequence& s, LayerState& l, int il, int j);
    /// Codes of positions [c0, c1) (after the sinks) of every stream, blocks of streams side by side.
    void encode(Sequence& s, LayerState& l, std::int64_t c0, std::int64_t c1);
    /// Codes of positions [c0, c1) of one stream: the keys (value = false) or values of KV head ih.
    void encode_stream(const Sequence& s, const LayerState& l, int ih, bool value, std::int64_t c0,
                       std::int64_t c1) const;
    void release_large_scratch();
    void ensure_pages(std::vector<std::int32_t>& pages, PagePool& pool, std::int64_t n_pages);

    std::uint8_t* code_region(const Sequence& s, const LayerState& l, std::int64_t i, int ih, bool value) const {
        const std::uint8_t* page = code_pool_->page(s.code_pages[std::size_t(i / p_.page)]);
        return const_cast<std::uint8_t*>(page) + (value ? l.v_off : l.k_off)[std::size_t(ih)];
    }
    f16_t* dense_row(const Sequence& s, int il, std::int64_t t, int ih, bool value) const {
        const std::uint8_t* page = dense_pool_->page(s.dense_pages[std::size_t(t / p_.page)]);
        const std::size_t idx =
            ((std::size_t(L_.slot[il]) * shape().n_kv_head + ih) * 2 + (value ? 1 : 0)) * std::size_t(p_.page) +
            std::size_t(t % p_.page);
        return reinterpret_cast<f16_t*>(const_cast<std::uint8_t*>(page) + idx * L_.row_bytes);
    }

    /// Versions [0, n) of layer l, KV head ih, as the rows of one call read them (into ws.versions).
    void prepare_versions(const LayerState& l, int ih, int n, bool many_rows, AttendScratch& ws) const;
    void attend_codes(const Sequence& s, const LayerState& l, int ih, const float* q, int group, float scale,
                      std::int64_t c, AttentionPartial& part) const;
    void attend_dense_layer(const Sequence& s, int il, int ih, const float* q, int group, float scale, std::int64_t p,
                            AttentionPartial& part) const;

    // kv state (definitions at the end of the file)
    void save_dense_layer(const Sequence& s, int il, ByteWriter& out) const;
    void save_coded_layer(const Sequence& s, const LayerState& l, ByteWriter& out) const;
    void restore_dense_layer(Sequence& s, int il, ByteReader& in);
    void restore_coded_layer(Sequence& s, int il, ByteReader& in);
    /// Restored code regions of every calibrated layer tile the first s.assigned bytes per token of a page.
    void check_restored_regions(const Sequence& s, ByteReader& in) const;

    PqKvParams p_;
    PqLayout L_;
    std::uint64_t budget_;
    PqAllocation pinned_;  ///< bits=: m taken instead of chosen, per layer (make_pq_kv_cache with an allocation)
    PqAttentionOptions attn_opts_;
    std::unique_ptr<PagePool> code_pool_, dense_pool_;
    std::map<int, Sequence> seqs_;
    // training scratch (append is called on one thread; its encode tasks have encode_scratch())
    std::vector<float> xk_, xv_;           ///< [n_kv][rows][D] f32 training rows
    std::vector<std::vector<float>> aug_;  ///< [n_kv] RoPE-augmented key training rows
    std::optional<RowCodec> window_codec_; ///< wq=: codec of the tail rows (none: f16)
    // key calibration augmentation (aug=)
    int aug_copies_ = 0;
    std::vector<float> inv_freq_;          ///< [D/2] RoPE pair frequencies
    std::int64_t aug_context_ = 0;         ///< the context the last version's rotations reach (0 = unknown)
};

// ---- budget ------------------------------------------------------------------------------------------

void PqKvCache::charge(const Sequence& s, int seq_id, int il, std::int64_t n_new, std::int64_t n1) const {
    if (budget_ == 0 || n1 <= s.n_max) return;
    std::uint64_t others = 0;
    for (const auto& [id, o] : seqs_)
        if (&o != &s) others += footprint(o.n_max);
    const std::uint64_t now = others + footprint(s.n_max) + free_pool_bytes();
    // New pages come from the free list first.
    std::int64_t free_code = code_pool_ ? code_pool_->n_free() : 0, free_dense = dense_pool_ ? dense_pool_->n_free() : 0;
    if (code_pool_) {
        const std::int64_t need = (L_.sched.coded(n1) + p_.page - 1) / p_.page - std::int64_t(s.code_pages.size());
        free_code = std::max<std::int64_t>(0, free_code - std::max<std::int64_t>(need, 0));
    }
    if (dense_pool_) {
        const std::int64_t need = (n1 + p_.page - 1) / p_.page - std::int64_t(s.dense_pages.size());
        free_dense = std::max<std::int64_t>(0, free_dense - std::max<std::int64_t>(need, 0));
    }
    std::uint64_t after = others + footprint(n1);
    if (code_pool_) after += std::uint64_t(free_code) * code_pool_->page_bytes();
    if (dense_pool_) after += std::uint64_t(free_dense) * dense_pool_->page_bytes();
    AQPIM_CHECK(after <= budget_,
                "kv cache {}: appending {} tokens to layer {} of sequence {} (to {} tokens) needs {} bytes in all, over "
                "the memory budget of {} bytes (holding {} bytes now)",
                scheme(), n_new, il, seq_id, n1, after, budget_, now);
}

void PqKvCache::ensure_pages(std::vector<std::int32_t>& pages, PagePool& pool, std::int64_t n_pages) {
    while (std::int64_t(pages.size()) < n_pages) pages.push_back(pool.allocate());
}

// ---- append ------------------------------------------------------------------------------------------

void PqKvCache::append(int il, int seq_id, std::int64_t n, const float* k, const float* v) {
    AQPIM_CHECK(n >= 0, "kv cache {}: cannot append {} tokens", scheme(), n);
    layer(seq_id, il);  // validates
    Sequence& s = seqs_.find(seq_id)->second;
    LayerState& l = s.layers[il];
    if (n == 0) return;
    const int n_kv = shape().n_kv_head, D = shape().head_dim;
    // Rows are stored as f16 (or straight from f32 in the wq= codec) and everything (training, codes,
    // attention) reads the stored values, so a token is coded the same whichever call appended it.
    for (auto [x, what] : {std::pair{k, "key"}, std::pair{v, "value"}}) {
        const std::int64_t i = first_outside_f16(x, n * n_kv * D);
        if (i >= 0)
            AQPIM_FAIL("kv cache {}: {} of token {} (KV head {}, dim {}) of layer {} is {}: not a finite f16 value",
                       scheme(), what, l.n + i / (n_kv * D), (i / D) % n_kv, i % D, il, x[i]);
    }
    const std::int64_t n0 = l.n, n1 = n0 + n;
    charge(s, seq_id, il, n, n1);
    const std::int64_t row_stride = std::int64_t(n_kv) * D;

    if (L_.dense[il]) {
        ensure_pages(s.dense_pages, *dense_pool_, (n1 + p_.page - 1) / p_.page);
        for (std::int64_t t = n0; t < n1; ++t)
            for (int ih = 0; ih < n_kv; ++ih) {
                const std::int64_t src = (t - n0) * row_stride + ih * D;
                f32_to_fp16(k + src, dense_row(s, il, t, ih, false), std::size_t(D));
                f32_to_fp16(v + src, dense_row(s, il, t, ih, true), std::size_t(D));
            }
        l.n = n1;
        s.n_max = std::max(s.n_max, n1);
        return;
    }

    // 1. f16 rows: sinks, then the tail.
    const std::int64_t S = p_.sinks;
    if (n0 < S)
        for (int ih = 0; ih < n_kv; ++ih) {
            l.sink_k[ih].resize(std::size_t(std::min(n1, S)) * D);
            l.sink_v[ih].resize(std::size_t(std::min(n1, S)) * D);
        }
    for (std::int64_t t = n0; t < std::min(n1, S); ++t)
        for (int ih = 0; ih < n_kv; ++ih) {
            const std::int64_t src = (t - n0) * row_stride + ih * D;
            f32_to_fp16(k + src, l.sink_k[ih].data() + t * D, std::size_t(D));
            f32_to_fp16(v + src, l.sink_v[ih].data() + t * D, std::size_t(D));
        }
    const std::int64_t t0 = std::max(n0, S);
    if (n1 > t0)  // each stream on its own (wq= codes them): side by side when there are many rows
        parallel_for(
            2 * n_kv,
            [&](std::int64_t stream) {
                const int ih = int(stream % n_kv);
                const float* src = (stream < n_kv ? k : v) + (t0 - n0) * row_stride + ih * D;
                (stream < n_kv ? l.tail_k : l.tail_v)[ih].push(src, n1 - t0, row_stride);
            },
            (n1 - t0) * 2 * n_kv >= kParallelAppendRows ? 0 : 1);

    // 2. Codebook versions whose training point falls in this append.
    const PqSchedule& sc = L_.sched;
    for (int j = int(l.versions.size()); j < sc.versions_trained(n1 - S); ++j) train_version(s, l, il, j);

    // 3. Codes of the tokens rows from now on read as codes.
    const std::int64_t c0 = sc.coded(n0), c1 = sc.coded(n1);
    if (c1 > c0) {
        ensure_pages(s.code_pages, *code_pool_, (c1 + p_.page - 1) / p_.page);
        encode(s, l, c0, c1);
    }

    // 4. Keep the f16 rows the rows of this step read (from the first one's), drop the rest.
    const std::int64_t keep = S + sc.coded(n0 + 1);
    for (int ih = 0; ih < n_kv; ++ih) {
        l.tail_k[ih].drop_before(keep);
        l.tail_v[ih].drop_before(keep);
    }
    l.n = n1;
    s.n_max = std::max(s.n_max, n1);
    release_large_scratch();
}

void PqKvCache::release_large_scratch() {
    // The scratch of a long prefill is as large as the prefill; memory() does not count it, so it is
    // not kept past the call that needed it (the small scratch of decode steps is).
    constexpr std::size_t kKeepBytes = std::size_t(16) << 20;
    std::size_t bytes = (xk_.capacity() + xv_.capacity()) * sizeof(float);
    for (const auto& a : aug_) bytes += a.capacity() * sizeof(float);
    if (bytes <= kKeepBytes) return;
    // (x = {} would keep the capacity: it assigns an empty initializer list)
    std::vector<float>().swap(xk_);
    std::vector<float>().swap(xv_);
    std::vector<std::vector<float>>().swap(aug_);
}

void PqKvCache::train_version(Sequence& s, LayerState& l, int il, int j) {
    const int n_kv = shape().n_kv_head, D = shape().head_dim;
    const std::int64_t nt = L_.sched.n_train, first = p_.sinks + L_.sched.version_start(j);
    const std::size_t per = std::size_t(nt) * D;
    xk_.resize(per * n_kv);
    xv_.resize(per * n_kv);
    std::vector<const float*> pk(n_kv), pv(n_kv);
    for (int ih = 0; ih < n_kv; ++ih) {
        AQPIM_ASSERT(l.tail_k[ih].first() <= first && l.tail_k[ih].end() >= first + nt);
        l.tail_k[ih].read(first, nt, xk_.data() + ih * per);
        l.tail_v[ih].read(first, nt, xv_.data() + ih * per);
        pk[ih] = xk_.data() + ih * per;
        pv[ih] = xv_.data() + ih * per;
    }
    // Keys: RoPE-rotated copies cover the positions this version will code (docs/kv-pq.md).
    std::int64_t nk = nt;
    if (aug_copies_ > 0) {
        double span = kAugSpanUnknownContext;
        if (j + 1 < L_.sched.versions)
            span = double(L_.sched.refresh);
        else if (aug_context_ > 0)
            span = double(std::max<std::int64_t>(aug_context_ - first, nt));
        aug_.resize(std::size_t(n_kv));
        parallel_for(n_kv, [&](std::int64_t h) {  // each head from its own seed
            const int ih = int(h);
            const std::uint64_t seed = p_.seed * 0x9E3779B97F4A7C15ull + std::uint64_t(il) * 1000003u + std::uint64_t(j) * 7919u + std::uint64_t(ih);
            rope_augment(pk[ih], nt, D, p_.key_pairs(shape()), inv_freq_, aug_copies_, span, seed, aug_[ih]);
            pk[ih] = aug_[ih].data();
        });
        nk = nt * (1 + aug_copies_);
    }
    const PqTrainSet tk{pk, nk}, tv{pv, nt};
    if (j > 0) {
        PqLayerVersion v = train_pq_layer_version(p_, shape(), l.Mk, l.Mv, tk, tv);
        v.keep_counted_only(p_.codebooks);
        add_version(l, std::move(v));
        return;
    }
    // Version 0 fixes the layer's m and its place in the code pages.
    PqLayerVersion v0;
    const bool pinned = p_.bits > 0 && std::size_t(il) < pinned_.k_m.size() && !pinned_.k_m[std::size_t(il)].empty();
    if (pinned) {
        l.Mk = pinned_.k_m[std::size_t(il)];
        l.Mv = pinned_.v_m[std::size_t(il)];
        std::size_t bytes = 0;
        for (int ih = 0; ih < n_kv; ++ih)
            bytes += pq_token_code_bytes(l.Mk[ih], p_.nbits) + pq_token_code_bytes(l.Mv[ih], p_.nbits);
        AQPIM_CHECK(bytes <= L_.width - s.assigned,
                    "kv cache {}: the pinned m of layer {} take {} code bytes per token, {} are left", scheme(), il, bytes,
                    L_.width - s.assigned);
        v0 = train_pq_layer_version(p_, shape(), l.Mk, l.Mv, tk, tv);
    } else if (p_.bits > 0) {
        const int left = L_.n_coded_layers - s.n_calibrated;
        const std::size_t share = (L_.width - s.assigned) / std::size_t(left);
        PqLayerChoice c = choose_pq_layer(p_, shape(), share, tk, tv);
        l.Mk = c.Mk;
        l.Mv = c.Mv;
        v0 = std::move(c.version);
    } else {
        l.Mk.assign(n_kv, L_.Mk);
        l.Mv.assign(n_kv, L_.Mv);
        v0 = train_pq_layer_version(p_, shape(), l.Mk, l.Mv, tk, tv);
    }
    v0.keep_counted_only(p_.codebooks);
    add_version(l, std::move(v0));
    const std::size_t P = std::size_t(p_.page);
    std::size_t off = s.assigned * P;
    l.k_off.resize(n_kv);
    l.v_off.resize(n_kv);
    for (int ih = 0; ih < n_kv; ++ih) {
        l.k_off[ih] = off;
        off += P * pq_token_code_bytes(l.Mk[ih], p_.nbits);
        l.v_off[ih] = off;
        off += P * pq_token_code_bytes(l.Mv[ih], p_.nbits);
    }
    l.token_bytes = off / P - s.assigned;
    s.assigned += l.token_bytes;
    ++s.n_calibrated;
    AQPIM_ASSERT(s.assigned <= L_.width);
}

void PqKvCache::encode(Sequence& s, LayerState& l, std::int64_t c0, std::int64_t c1) {
    if (c1 <= c0) return;
    const int n_kv = shape().n_kv_head, n_streams = 2 * n_kv;
    // Tasks: one stream (a KV head's keys or values) of one aligned block of kEncodeBlockTokens
    // positions, so no two tasks write the same code block (4-bit codes share bytes within one).
    const std::int64_t b0 = c0 / kEncodeBlockTokens, n_blocks = (c1 - 1) / kEncodeBlockTokens + 1 - b0;
    const std::int64_t n_tasks = n_blocks * n_streams;
    parallel_for(
        n_tasks,
        [&](std::int64_t task) {
            const std::int64_t blk = b0 + task / n_streams;
            const int stream = int(task % n_streams);
            encode_stream(s, l, stream % n_kv, stream >= n_kv, std::max(c0, blk * kEncodeBlockTokens),
                          std::min(c1, (blk + 1) * kEncodeBlockTokens));
        },
        (c1 - c0) * n_streams >= kParallelAppendRows ? 0 : 1);
}

void PqKvCache::encode_stream(const Sequence& s, const LayerState& l, int ih, bool value, std::int64_t c0,
                              std::int64_t c1) const {
    const int D = shape().head_dim, nbits = p_.nbits;
    const std::int64_t S = p_.sinks, P = p_.page;
    EncodeScratch& ws = encode_scratch();
    for (std::int64_t a = c0; a < c1;) {
        // A run coded by one version.
        const int j = L_.sched.version_of(a);
        std::int64_t b = c1;
        if (j + 1 < L_.sched.versions) b = std::min(b, L_.sched.version_start(j + 1));
        const std::int64_t cnt = b - a;
        const PqLayerVersion& ver = l.versions[std::size_t(j)];
        const ProductQuantizer& q = (value ? ver.v : ver.k)[std::size_t(ih)];  // its transform
        // The codebooks (cb=f16: widened) and their squared norms, computed here: the cache keeps
        // no norms (they are not counted; PqLayerVersion::keep_counted_only).
        const float* centroids = ver.widened_centroids(value, ih, ws.wide_centroids);
        if (!centroids) centroids = q.centroids();
        ws.norms.resize(std::size_t(q.M()) * q.ksub());
        squared_norms(centroids, std::int64_t(ws.norms.size()), q.dsub(), ws.norms.data());
        const TailRows& rows = value ? l.tail_v[ih] : l.tail_k[ih];
        AQPIM_ASSERT(rows.first() <= S + a && rows.end() >= S + b);
        ws.rows.resize(std::size_t(cnt) * D);
        rows.read(S + a, cnt, ws.rows.data());
        const int M = q.M();
        ws.codes.resize(std::size_t(cnt) * M);
        q.encode_with(centroids, ws.norms.data(), ws.rows.data(), cnt, ws.codes.data(), ws.y);
        if (!value) refine_codes_anisotropic(q, centroids, ws.rows.data(), cnt, p_.aniso, ws.codes.data());
        for (std::int64_t i = a; i < b; ++i)
            store_token_code(code_region(s, l, i, ih, value), i % P, M, nbits, ws.codes.data() + (i - a) * M);
        a = b;
    }
}

// ---- attention ---------------------------------------------------------------------------------------

void PqKvCache::prepare_versions(const LayerState& l, int ih, int n, bool many_rows, AttendScratch& ws) const {
    if (ws.versions.size() < std::size_t(n)) ws.versions.resize(std::size_t(n));
    for (int j = 0; j < n; ++j) {
        const PqLayerVersion& ver = l.versions[std::size_t(j)];
        if (ver.compact() && j + 2 < n) l.versions[std::size_t(j + 2)].prefetch(ih);  // widened here, read here
        VersionTables& t = ws.versions[std::size_t(j)];
        t.options = attn_opts_;
        // cb=f16/int8: the transforms from the stored quantizers, the codebooks widened once per call.
        t.options.k_centroids = ver.widened_centroids(false, ih, t.k_centroids);
        t.options.v_centroids = ver.widened_centroids(true, ih, t.v_centroids);
        const ProductQuantizer& qv = ver.v[std::size_t(ih)];
        if (many_rows && qv.nbits() == 4) {  // the permute value path's layout, once for every row
            t.v_columns.resize(std::size_t(qv.M()) * qv.dsub() * 16);
            codebook_columns(t.options.v_centroids ? t.options.v_centroids : qv.centroids(), qv.M(), qv.dsub(),
                             t.v_columns.data());
            t.options.v_columns = t.v_columns.data();
        }
    }
}

void PqKvCache::attend_codes(const Sequence& s, const LayerState& l, int ih, const float* q, int group, float scale,
                             std::int64_t c, AttentionPartial& part) const {
    AttendScratch& ws = attend_scratch();
    const std::int64_t P = p_.page;
    const int D = shape().head_dim;
    const int last = L_.sched.version_of(c - 1);
    const auto version_end = [&](int j) {
        return j + 1 < L_.sched.versions ? std::min(c, L_.sched.version_start(j + 1)) : c;
    };
    // Version j's codes as page spans.
    const auto spans_of = [&](int j, std::vector<PqCodeSpan>& spans) {
        spans.clear();
        for (std::int64_t i = L_.sched.version_start(j), b = version_end(j); i < b; i = (i / P + 1) * P)
            spans.push_back({code_region(s, l, i, ih, false), code_region(s, l, i, ih, true),
                             std::min(b, (i / P + 1) * P) - i});
    };
    if (p_.attn == PqAttendMode::codes) spans_of(0, ws.spans);
    for (int j = 0; j <= last; ++j) {
        const std::int64_t a = L_.sched.version_start(j), b = version_end(j);
        const PqLayerVersion& ver = l.versions[std::size_t(j)];
        if (!ver.compact() && j + 2 <= last) l.versions[std::size_t(j + 2)].prefetch(ih);
        if (p_.attn == PqAttendMode::codes) {
            // The next version's first tile of codes, requested while this one is scanned: the scans
            // prefetch ahead within a version only, and at refresh=512 every version is one tile.
            if (j < last) {
                spans_of(j + 1, ws.next_spans);
                const PqLayerVersion& next = l.versions[std::size_t(j + 1)];
                const std::size_t kbb = code_block_bytes(next.k[ih].M(), p_.nbits),
                                  vbb = code_block_bytes(next.v[ih].M(), p_.nbits);
                std::int64_t budget = kNextVersionPrefetchBlocks;
                for (const PqCodeSpan& sp : ws.next_spans) {
                    const std::int64_t nb = std::min(code_blocks_for(sp.n_tokens), budget);
                    prefetch_l2(sp.k_blocks, std::size_t(nb) * kbb);
                    prefetch_l2(sp.v_blocks, std::size_t(nb) * vbb);
                    if ((budget -= nb) == 0) break;
                }
            }
            attend_pq_spans(q, group, ver.k[ih], ver.v[ih], ws.spans, scale, ws.versions[std::size_t(j)].options, part);
            std::swap(ws.spans, ws.next_spans);
            continue;
        }
        thread_local ProductQuantizer wide_k, wide_v;  // f16 codebooks widened (cb=f16)
        const ProductQuantizer &qk = ver.quantizer(false, ih, wide_k), &qv = ver.quantizer(true, ih, wide_v);
        // Decode-then-dense: the reference.
        const std::int64_t cnt = b - a;
        for (const bool value : {false, true}) {
            const ProductQuantizer& pq = value ? qv : qk;
            ws.codes.resize(std::size_t(cnt) * pq.M());
            for (std::int64_t i = a; i < b; ++i)
                for (int m = 0; m < pq.M(); ++m)
                    ws.codes[std::size_t(i - a) * pq.M() + m] =
                        code_at(code_region(s, l, i, ih, value), i % P, pq.M(), p_.nbits, m);
            std::vector<float>& out = value ? ws.v : ws.k;
            out.resize(std::size_t(cnt) * D);
            pq.decode(ws.codes.data(), cnt, out.data());
        }
        attend_dense_f32(q, group, D, ws.k.data(), ws.v.data(), cnt, scale, part);
    }
}

void PqKvCache::attend_dense_layer(const Sequence& s, int il, int ih, const float* q, int group, float scale,
                                   std::int64_t p, AttentionPartial& part) const {
    const std::int64_t P = p_.page;
    for (std::int64_t t = 0; t <= p; t += P) {
        const std::int64_t cnt = std::min(P, p + 1 - t);
        attend_dense_f16(q, group, shape().head_dim, dense_row(s, il, t, ih, false), dense_row(s, il, t, ih, true), cnt,
                         scale, part);
    }
}

void PqKvCache::attend(int il, int seq_id, int ih, const KvQuery& qr) const {
    const LayerState& l = layer(seq_id, il);
    const Sequence& s = sequence(seq_id);
    AQPIM_CHECK(ih >= 0 && ih < shape().n_kv_head, "kv cache {}: KV head {} out of range [0, {})", scheme(), ih,
                shape().n_kv_head);
    AQPIM_CHECK(qr.group >= 1 && qr.n_rows >= 0, "kv cache {}: query group {} and rows {} must be positive", scheme(),
                qr.group, qr.n_rows);
    const int D = shape().head_dim;
    const std::int64_t S = p_.sinks;
    AttendScratch& ws = attend_scratch();
    AttentionPartial& part = ws.part;
    // What the rows share, prepared once: the codebooks of the versions they read, and the tail
    // rows [f_lo, p_hi] they read in f16 when those are stored coded (wq=).
    std::int64_t c_hi = 0, f_lo = l.n, p_hi = -1;
    for (int r = 0; r < qr.n_rows; ++r) {
        const std::int64_t p = qr.pos[r];
        AQPIM_CHECK(p >= 0 && p < l.n, "kv cache {}: query position {} but layer {} of sequence {} holds {} tokens",
                    scheme(), p, il, seq_id, l.n);
        if (L_.dense[il]) continue;
        const std::int64_t c = L_.sched.coded(p + 1), f = S + c;  // f: the first position read in f16 after the sinks
        c_hi = std::max(c_hi, c);
        if (p >= f) {
            AQPIM_CHECK(l.tail_k[ih].first() <= f,
                        "kv cache {}: a row at position {} of layer {} of sequence {} reads f16 rows from position "
                        "{}, dropped since: the PQ cache answers the rows of the latest append (time consistency)",
                        scheme(), p, il, seq_id, f);
            f_lo = std::min(f_lo, f);
            p_hi = std::max(p_hi, p);
        }
    }
    const bool tail_f16 = L_.dense[il] || l.tail_k[ih].is_f16();
    if (c_hi > 0) {
        // The parameters of every version and the rows at the end (f16, or wq='s codes) are requested
        // ahead of use: a decode call reads each once, and one by one they were cold misses in a row
        // (docs/pq-kernels.md). The first two versions' parameters here; version j + 2's while
        // version j is widened (compact codebooks, prepare_versions) or scanned (attend_codes).
        const int n_versions = L_.sched.version_of(c_hi - 1) + 1;
        for (int j = 0; j < std::min(n_versions, 2); ++j) l.versions[std::size_t(j)].prefetch(ih);
        if (p_hi >= f_lo) {  // as stored; wq='s rows are widened below, after the tables
            const std::size_t bytes = std::size_t(p_hi + 1 - f_lo) * l.tail_k[ih].row_bytes();
            prefetch_l2(l.tail_k[ih].stored_rows(f_lo), bytes);
            prefetch_l2(l.tail_v[ih].stored_rows(f_lo), bytes);
        }
        prepare_versions(l, ih, n_versions, qr.n_rows > 1, ws);
    }
    if (!tail_f16 && p_hi >= f_lo) {
        const std::int64_t cnt = p_hi + 1 - f_lo;
        ws.tail_k.resize(std::size_t(cnt) * D);
        ws.tail_v.resize(std::size_t(cnt) * D);
        l.tail_k[ih].read(f_lo, cnt, ws.tail_k.data());
        l.tail_v[ih].read(f_lo, cnt, ws.tail_v.data());
    }
    for (int r = 0; r < qr.n_rows; ++r) {
        const std::int64_t p = qr.pos[r];
        const float* q = qr.q + r * qr.q_stride;
        part.reset(qr.group, D);
        if (L_.dense[il]) {
            attend_dense_layer(s, il, ih, q, qr.group, qr.scale, p, part);
        } else {
            attend_dense_f16(q, qr.group, D, l.sink_k[ih].data(), l.sink_v[ih].data(), std::min(p + 1, S), qr.scale,
                             part);
            const std::int64_t c = L_.sched.coded(p + 1);
            if (c > 0) attend_codes(s, l, ih, q, qr.group, qr.scale, c, part);
            const std::int64_t f = S + c;
            if (p >= f) {
                const std::int64_t cnt = p + 1 - f;
                if (tail_f16) {
                    attend_dense_f16(q, qr.group, D, l.tail_k[ih].f16_row(f), l.tail_v[ih].f16_row(f), cnt, qr.scale,
                                     part);
                } else {  // wq=: the rows widened above
                    const std::size_t off = std::size_t(f - f_lo) * D;
                    attend_dense_f32(q, qr.group, D, ws.tail_k.data() + off, ws.tail_v.data() + off, cnt, qr.scale,
                                     part);
                }
            }
        }
        part.finalize(qr.out + r * qr.out_stride);
    }
}

// ---- accounting --------------------------------------------------------------------------------------

KvMemory PqKvCache::memory() const {
    PqParts parts;
    std::int64_t n_tokens = 0;
    const std::uint64_t n_kv = std::uint64_t(shape().n_kv_head), row = L_.row_bytes, tail_row = L_.tail_row_bytes;
    parts.window_type = p_.window_type;
    for (const auto& [id, s] : seqs_) {
        n_tokens += s.n_max;
        for (int il = 0; il < shape().n_layer; ++il) {
            const LayerState& l = s.layers[il];
            if (L_.dense[il]) {
                parts.dense += std::uint64_t(l.n) * n_kv * 2 * row;
                continue;
            }
            const std::int64_t c = parts.add_layer_rows(L_.sched, l.n, n_kv * 2, row, tail_row);
            parts.codes += std::uint64_t(c) * l.token_bytes;
            parts.codebooks += l.codebook_bytes;
        }
        const std::uint64_t pages = std::uint64_t(s.code_pages.size()) * (code_pool_ ? code_pool_->page_bytes() : 0) +
                                    std::uint64_t(s.dense_pages.size()) * (dense_pool_ ? dense_pool_->page_bytes() : 0);
        parts.page_slack += pages;
    }
    parts.page_slack -= parts.codes + parts.dense;
    KvMemory m;
    m.n_tokens = n_tokens;
    parts.add_to(m);
    m.add("free pool pages", free_pool_bytes());
    return m;
}

// ---- the layout as the CUDA kernels read it ------------------------------------------------------------

PqLayerReadView PqKvCache::read_view(int seq_id, int il) const {
    const LayerState& l = layer(seq_id, il);
    const Sequence& s = sequence(seq_id);
    AQPIM_CHECK(!L_.dense[il], "kv cache {}: layer {} is dense f16, not coded", scheme(), il);
    AQPIM_CHECK(l.n > 0, "kv cache {}: layer {} of sequence {} holds no token", scheme(), il, seq_id);
    AQPIM_CHECK(p_.window_type == "f16", "kv cache {}: the CUDA kernels read the window in f16, not wq={}", scheme(),
                p_.window_type);
    const int n_kv = shape().n_kv_head, D = shape().head_dim;
    const std::int64_t P = p_.page, S = std::min<std::int64_t>(p_.sinks, l.n), c = L_.sched.coded(l.n);
    PqLayerReadView v;
    v.nbits = p_.nbits;
    v.page_tokens = p_.page;
    v.head_dim = D;
    v.page_bytes = L_.code_page_bytes;
    v.n_coded = c;
    v.k_off = l.k_off;
    v.v_off = l.v_off;
    for (std::int64_t k = 0; k * P < c; ++k) {
        const int j = L_.sched.version_of(k * P);
        AQPIM_ASSERT(j == L_.sched.version_of(std::min(c, (k + 1) * P) - 1));  // refresh: whole pages
        v.pages.push_back(code_pool_->page(s.code_pages[std::size_t(k)]));
        v.page_version.push_back(j);
    }
    for (const PqLayerVersion& ver : l.versions) {
        auto& vk = v.k.emplace_back();
        auto& vv = v.v.emplace_back();
        for (int ih = 0; ih < n_kv; ++ih) {
            ProductQuantizer wide;
            vk.push_back(ver.quantizer(false, ih, wide));
            vv.push_back(ver.quantizer(true, ih, wide));
        }
    }
    // f16 rows: the sinks, then the tail from the first position not read from codes.
    const std::int64_t f = S + c;
    v.n_f16 = S + (l.n - f);
    v.f16_k.resize(n_kv);
    v.f16_v.resize(n_kv);
    for (int ih = 0; ih < n_kv; ++ih) {
        for (const bool value : {false, true}) {
            std::vector<std::uint16_t>& rows = value ? v.f16_v[ih] : v.f16_k[ih];
            const f16_t* sink = (value ? l.sink_v : l.sink_k)[ih].data();
            rows.assign(sink, sink + S * D);
            if (l.n > f) {
                const TailRows& tail = (value ? l.tail_v : l.tail_k)[ih];
                AQPIM_ASSERT(tail.first() <= f);
                const f16_t* row = tail.f16_row(f);
                rows.insert(rows.end(), row, row + (l.n - f) * D);
            }
        }
    }
    return v;
}

// ---- kv state (section "pq" of docs/kv-state.md) -----------------------------------------------------

void PqKvCache::save_sequence(int seq_id, ByteWriter& out) const {
    const Sequence& s = sequence(seq_id);
    write_layer_counts(out, *this, seq_id);
    // What the bytes depend on beyond the scheme text: the page width (bits= solves it at the context)
    // and the context the last version's key augmentation reaches.
    out.u64(L_.width);
    out.i64(aug_context_);
    for (int il = 0; il < shape().n_layer; ++il) {
        if (L_.dense[il])
            save_dense_layer(s, il, out);
        else
            save_coded_layer(s, s.layers[il], out);
    }
}

void PqKvCache::save_dense_layer(const Sequence& s, int il, ByteWriter& out) const {
    const std::int64_t n = s.layers[il].n, P = p_.page;
    for (int ih = 0; ih < shape().n_kv_head; ++ih)
        for (const bool value : {false, true})
            for (std::int64_t t = 0; t < n; t += P)  // a page holds rows [t, t + P) contiguously
                out.u16s(dense_row(s, il, t, ih, value), std::size_t(std::min(P, n - t)) * shape().head_dim);
}

void PqKvCache::save_coded_layer(const Sequence& s, const LayerState& l, ByteWriter& out) const {
    const int n_kv = shape().n_kv_head, D = shape().head_dim;
    const std::int64_t S = std::min<std::int64_t>(p_.sinks, l.n), c = L_.sched.coded(l.n), P = p_.page;
    for (int ih = 0; ih < n_kv; ++ih)
        for (const auto* sink : {&l.sink_k[ih], &l.sink_v[ih]}) out.u16s(sink->data(), std::size_t(S) * D);
    out.u32(std::uint32_t(l.versions.size()));
    if (!l.versions.empty())
        for (int ih = 0; ih < n_kv; ++ih) {
            out.u32(std::uint32_t(l.Mk[ih]));
            out.u32(std::uint32_t(l.Mv[ih]));
            out.u64(l.k_off[ih]);
            out.u64(l.v_off[ih]);
        }
    for (const PqLayerVersion& ver : l.versions)
        for (int ih = 0; ih < n_kv; ++ih) {
            write_pq_quantizer(out, ver, false, ih);
            write_pq_quantizer(out, ver, true, ih);
        }
    // Codes of coded indices [0, c): per stream the code blocks of each page, concatenated (pages
    // hold whole blocks), so the bytes do not depend on the page size.
    for (int ih = 0; ih < n_kv && c > 0; ++ih)
        for (const bool value : {false, true}) {
            const int M = (value ? l.Mv : l.Mk)[ih];
            for (std::int64_t i = 0; i < c; i += P)
                out.bytes(code_region(s, l, i, ih, value),
                          std::size_t(code_blocks_for(std::min(P, c - i))) * code_block_bytes(M, p_.nbits));
        }
    // The tail a decode step at the last position reads: rows [sinks + c, n), as stored (f16 or wq=).
    const std::int64_t first = p_.sinks + c;
    for (int ih = 0; ih < n_kv; ++ih)
        for (const TailRows* rows : {&l.tail_k[ih], &l.tail_v[ih]})
            if (l.n > first) out.bytes(rows->stored_rows(first), std::size_t(l.n - first) * rows->row_bytes());
}

void PqKvCache::restore_sequence(int seq_id, ByteReader& in) {
    check_new_sequence(*this, seq_id);
    const std::vector<std::int64_t> n = read_layer_counts(in, shape());
    const std::uint64_t width = in.u64("pq page width");
    const std::int64_t aug_context = in.i64("pq augmentation context");
    if (width != L_.width || aug_context != aug_context_)
        in.fail(fmt::format("saved by a cache of {} code bytes per token with key augmentation to context {}, this "
                            "cache has {} and {}: build it with the context the saving cache had (KvCacheOptions::"
                            "context, or ctx= in the spec)",
                            width, aug_context, L_.width, aug_context_));
    add_sequence(seq_id);
    Sequence& s = seqs_.find(seq_id)->second;
    try {
        const std::int64_t n_max = *std::max_element(n.begin(), n.end());
        try {
            charge(s, seq_id, 0, n_max, n_max);
        } catch (const Error& e) {
            AQPIM_FAIL("kv cache {}: restoring sequence {} of {} tokens: {}", scheme(), seq_id, n_max, e.what());
        }
        for (int il = 0; il < shape().n_layer; ++il) {
            s.layers[il].n = n[il];
            if (L_.dense[il])
                restore_dense_layer(s, il, in);
            else
                restore_coded_layer(s, il, in);
        }
        check_restored_regions(s, in);
        s.n_max = n_max;
    } catch (...) {
        remove_sequence(seq_id);
        throw;
    }
}

void PqKvCache::restore_dense_layer(Sequence& s, int il, ByteReader& in) {
    const std::int64_t n = s.layers[il].n, P = p_.page;
    // Pages only for rows the input holds.
    in.require(std::uint64_t(n) * shape().head_dim * 2 * shape().n_kv_head, sizeof(f16_t), "dense f16 layer rows");
    ensure_pages(s.dense_pages, *dense_pool_, (n + P - 1) / P);
    for (int ih = 0; ih < shape().n_kv_head; ++ih)
        for (const bool value : {false, true})
            for (std::int64_t t = 0; t < n; t += P)
                read_finite_f16(in, dense_row(s, il, t, ih, value), std::uint64_t(std::min(P, n - t)) * shape().head_dim,
                                fmt::format("layer {} KV head {} f16 {}", il, ih, value ? "values" : "keys"));
}

void PqKvCache::restore_coded_layer(Sequence& s, int il, ByteReader& in) {
    LayerState& l = s.layers[il];
    const int n_kv = shape().n_kv_head, D = shape().head_dim;
    const std::int64_t S = std::min<std::int64_t>(p_.sinks, l.n), c = L_.sched.coded(l.n), P = p_.page;
    const std::string at = fmt::format("layer {}", il);
    for (int ih = 0; ih < n_kv; ++ih)
        for (auto* sink : {&l.sink_k[ih], &l.sink_v[ih]}) {
            in.require(std::uint64_t(S) * D, 2, at + " sinks");
            sink->resize(std::size_t(S) * D);
            read_finite_f16(in, sink->data(), std::uint64_t(S) * D, at + " sinks");
        }
    // Versions: exactly those the schedule has trained at n tokens.
    const std::uint32_t n_versions = in.u32(at + " versions");
    const int want = l.n > p_.sinks ? L_.sched.versions_trained(l.n - p_.sinks) : 0;
    if (n_versions != std::uint32_t(want))
        in.fail(fmt::format("{} holds {} codebook versions; at {} tokens the schedule has trained {}", at, n_versions,
                            l.n, want));
    if (n_versions > 0) {
        l.Mk.resize(n_kv);
        l.Mv.resize(n_kv);
        l.k_off.resize(n_kv);
        l.v_off.resize(n_kv);
        const std::vector<int> ck = pq_m_candidates(p_, shape(), true), cv = pq_m_candidates(p_, shape(), false);
        const std::uint64_t region_end = std::uint64_t(L_.width) * std::uint64_t(P);
        l.token_bytes = 0;
        for (int ih = 0; ih < n_kv; ++ih) {
            for (const bool value : {false, true}) {
                const std::uint32_t M = in.u32(at + (value ? " value m" : " key m"));
                const int fixed = value ? L_.Mv : L_.Mk;
                const std::vector<int>& cand = value ? cv : ck;
                const bool ok = fixed > 0 ? M == std::uint32_t(fixed)
                                          : std::find(cand.begin(), cand.end(), int(M)) != cand.end();
                if (!ok)
                    in.fail(fmt::format("{} KV head {}: {} m = {} is not one this scheme codes with", at, ih,
                                        value ? "value" : "key", M));
                (value ? l.Mv : l.Mk)[ih] = int(M);
            }
            for (const bool value : {false, true}) {
                const std::uint64_t off = in.u64(at + " code offset");
                const std::uint64_t len = std::uint64_t(P) * pq_token_code_bytes((value ? l.Mv : l.Mk)[ih], p_.nbits);
                if (off > region_end || len > region_end - off)
                    in.fail(fmt::format("{} KV head {}: codes at byte {} (+{}) of a page of {} code bytes", at, ih, off,
                                        len, region_end));
                (value ? l.v_off : l.k_off)[ih] = std::size_t(off);
                l.token_bytes += std::size_t(len / std::uint64_t(P));
            }
        }
        s.assigned += l.token_bytes;
        ++s.n_calibrated;
        if (s.assigned > L_.width)
            in.fail(fmt::format("{}: the layers' codes take {} bytes per token, more than the page width {}", at,
                                s.assigned, L_.width));
    }
    for (std::uint32_t j = 0; j < n_versions; ++j)
        add_version(l, read_pq_version(in, p_, shape(), l.Mk, l.Mv, fmt::format("{} version {}", at, j)));
    std::uint64_t code_bytes = 0;  // pages only for codes the input holds
    for (int ih = 0; ih < n_kv && c > 0; ++ih)
        code_bytes += std::uint64_t(code_blocks_for(c)) *
                      (code_block_bytes(l.Mk[ih], p_.nbits) + code_block_bytes(l.Mv[ih], p_.nbits));
    in.require(code_bytes, 1, at + " codes");
    if (c > 0) ensure_pages(s.code_pages, *code_pool_, (c + P - 1) / P);
    for (int ih = 0; ih < n_kv && c > 0; ++ih)  // c > 0: version 0 is trained (the count was checked)
        for (const bool value : {false, true}) {
            const int M = (value ? l.Mv : l.Mk)[ih];
            const std::string field = fmt::format("{} KV head {} {} codes", at, ih, value ? "value" : "key");
            const auto blocks = in.bytes(std::uint64_t(code_blocks_for(c)) * code_block_bytes(M, p_.nbits), field);
            if (!code_blocks_canonical(blocks.data(), c, M, p_.nbits))
                in.fail(fmt::format("'{}': codes of padding tokens or subspaces are not zero", field));
            for (std::int64_t i = 0; i < c; i += P) {
                const std::size_t b = std::size_t(code_blocks_for(std::min(P, c - i))) * code_block_bytes(M, p_.nbits);
                std::memcpy(code_region(s, l, i, ih, value),
                            blocks.data() + std::size_t(i / kCodeBlock) * code_block_bytes(M, p_.nbits), b);
            }
        }
    const std::int64_t first = p_.sinks + c, rows = std::max<std::int64_t>(0, l.n - first);
    for (int ih = 0; ih < n_kv; ++ih)
        for (const bool value : {false, true}) {
            TailRows& tail = (value ? l.tail_v : l.tail_k)[ih];
            tail.init(D, first, window_codec_);
            const std::string field = fmt::format("{} KV head {} tail {}", at, ih, value ? "values" : "keys");
            const auto stored = in.bytes(std::uint64_t(rows) * tail.row_bytes(), field);
            if (tail.is_f16()) {  // finite, as append stores them
                ByteReader check(stored, in.what(), in.offset() - stored.size());
                std::vector<f16_t> values(std::size_t(rows) * D);
                read_finite_f16(check, values.data(), values.size(), field);
            }
            tail.push_stored(stored.data(), rows);
        }
}

void PqKvCache::check_restored_regions(const Sequence& s, ByteReader& in) const {
    std::vector<std::pair<std::size_t, std::size_t>> regions;  // [begin, end) bytes of a page
    const std::size_t P = std::size_t(p_.page);
    for (int il = 0; il < shape().n_layer; ++il) {
        const LayerState& l = s.layers[il];
        if (L_.dense[il] || l.versions.empty()) continue;
        for (int ih = 0; ih < shape().n_kv_head; ++ih) {
            regions.emplace_back(l.k_off[ih], l.k_off[ih] + P * pq_token_code_bytes(l.Mk[ih], p_.nbits));
            regions.emplace_back(l.v_off[ih], l.v_off[ih] + P * pq_token_code_bytes(l.Mv[ih], p_.nbits));
        }
    }
    std::sort(regions.begin(), regions.end());
    std::size_t end = 0;
    for (const auto& [a, b] : regions) {
        if (a != end)
            in.fail(fmt::format("the code regions of the layers' heads overlap or leave a gap at byte {} of a page", end));
        end = b;
    }
    if (end != s.assigned * P) in.fail("the code regions do not cover the page width the layers take");
}

}  // namespace
}  // namespace kv

PqLayerReadView pq_layer_read_view(const KvCache& cache, int seq_id, int il) {
    const auto* pq = dynamic_cast<const kv::PqKvCache*>(&cache);
    AQPIM_CHECK(pq != nullptr, "kv cache {}: not a PQ cache; the CUDA kernels read PQ caches only", cache.scheme());
    return pq->read_view(seq_id, il);
}

std::unique_ptr<KvCache> make_pq_kv_cache(const PqKvParams& params, const KvShape& shape, const KvCacheOptions& options) {
    params.validate(shape);
    return std::make_unique<kv::PqKvCache>(params, shape, options);
}

std::unique_ptr<KvCache> make_pq_kv_cache(const PqKvParams& params, const KvShape& shape, const KvCacheOptions& options,
                                          PqAllocation pinned) {
    params.validate(shape);
    AQPIM_CHECK(params.bits > 0 || pinned.k_m.empty(), "pinned pq allocation: {} chooses no m (no bits=)",
                params.to_string());
    const std::size_t n_layer = std::size_t(shape.n_layer), n_kv = std::size_t(shape.n_kv_head);
    AQPIM_CHECK(pinned.k_m.size() <= n_layer && pinned.v_m.size() == pinned.k_m.size(),
                "pinned pq allocation: {} key and {} value layers for a model of {}", pinned.k_m.size(),
                pinned.v_m.size(), n_layer);
    for (std::size_t il = 0; il < pinned.k_m.size(); ++il) {
        const std::vector<int>&mk = pinned.k_m[il], &mv = pinned.v_m[il];
        if (mk.empty() && mv.empty()) continue;
        AQPIM_CHECK(mk.size() == n_kv && mv.size() == n_kv, "pinned pq allocation: layer {} names {} key and {} value "
                    "heads, the model has {}", il, mk.size(), mv.size(), n_kv);
        for (const auto& [what, ms] : {std::pair{"key", &mk}, std::pair{"value", &mv}})
            for (int M : *ms)
                AQPIM_CHECK(M >= 1 && shape.head_dim % M == 0, "pinned pq allocation: layer {} {} m={} does not "
                            "divide head_dim {}", il, what, M, shape.head_dim);
    }
    return std::make_unique<kv::PqKvCache>(params, shape, options, std::move(pinned));
}

PqAllocation pq_allocation(const KvCache& cache, int seq_id) {
    const auto* pq = dynamic_cast<const kv::PqKvCache*>(&cache);
    AQPIM_CHECK(pq != nullptr, "kv cache {}: not a PQ cache, it has no m allocation", cache.scheme());
    return pq->allocation(seq_id);
}

std::unique_ptr<KvCache> make_pq_kv_cache(const KvSchemeSpec& spec, const KvShape& shape, const KvCacheOptions& options) {
    const PqKvParams p = PqKvParams::from_spec(spec, shape, options.context);
    try {
        return std::make_unique<kv::PqKvCache>(p, shape, options);
    } catch (const Error& e) {
        AQPIM_FAIL("--kv {}: {}", spec.text, e.what());
    }
}

}  // namespace aqpim
