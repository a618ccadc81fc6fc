#pragma once
// The adaptive PQ KV cache's state and class (internal to src/kv): one sequence's layers, their
// codebook versions and code pages. Definitions: pq_cache.cpp (budget, append, training, coding,
// accounting), pq_cache_attend.cpp (attention on the codes), pq_cache_state.cpp (the CUDA read
// view and the kv state). Design: docs/kv-pq.md.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/attention.h"
#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/kv_pq.h"
#include "aqpim/page_pool.h"
#include "kv/kv_state_io.h"
#include "kv/pq_codebooks.h"
#include "kv/pq_layout.h"
#include "kv/pq_tail_rows.h"

namespace aqpim::kv {

/// One layer of one sequence.
struct PqLayerState {
    std::int64_t n = 0;  ///< tokens appended
    // coded layers
    std::vector<AlignedBuffer<f16_t>> sink_k, sink_v;  ///< [n_kv_heads] of [sinks][D]
    std::vector<TailRows> tail_k, tail_v;              ///< [n_kv_heads] rows from sinks on not (yet) read as codes
    std::vector<PqLayerVersion> versions;              ///< trained codebook versions, oldest first
    std::uint64_t codebook_bytes = 0;                  ///< Σ versions' parameter_bytes() (add_version)
    std::vector<int> Mk, Mv;                           ///< [n_kv_heads] subspaces, set when version 0 is trained
    std::vector<std::size_t> k_off, v_off;             ///< [n_kv_heads] byte offset of the head's codes in a code page
    std::size_t token_bytes = 0;                       ///< code bytes of one token over the layer's heads
};

/// Appends a trained (counted-only) version and its bytes: memory(), called on every forward pass,
/// then sums one number per layer instead of every version's quantizers.
inline void add_version(PqLayerState& l, PqLayerVersion v) {
    l.codebook_bytes += v.parameter_bytes();
    l.versions.push_back(std::move(v));
}

struct PqSequence {
    std::vector<PqLayerState> layers;
    std::vector<std::int32_t> code_pages;   ///< page k: coded indices [k * page, (k + 1) * page)
    std::vector<std::int32_t> dense_pages;  ///< page k: positions [k * page, (k + 1) * page) of the f16 layers
    std::size_t assigned = 0;               ///< page width given to calibrated layers (bytes per token)
    int n_calibrated = 0;
    std::int64_t n_max = 0;                 ///< most tokens any layer holds
};

struct PqAttendScratch;  // pq_cache_attend.cpp

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
        PqSequence& s = seqs_[seq_id];
        s.layers.resize(shape().n_layer);
        const int n_kv_heads = shape().n_kv_head, D = shape().head_dim;
        for (int il = 0; il < shape().n_layer; ++il) {
            if (L_.dense[il]) continue;
            PqLayerState& l = s.layers[il];
            l.sink_k.resize(n_kv_heads);
            l.sink_v.resize(n_kv_heads);
            l.tail_k.resize(n_kv_heads);
            l.tail_v.resize(n_kv_heads);
            for (int ih = 0; ih < n_kv_heads; ++ih) {  // sink rows are allocated as they arrive (append)
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
    std::size_t scratch_bytes() const override;
    std::uint64_t sequence_bytes(std::int64_t n_tokens) const override { return footprint(n_tokens); }
    /// pq_layer_read_view (aqpim/kv_pq.h): layer il of sequence seq_id as a decode step reads it.
    PqLayerReadView read_view(int seq_id, int il) const;
    /// pq_allocation (aqpim/kv_pq.h).
    PqAllocation allocation(int seq_id) const {
        const PqSequence& s = sequence(seq_id);
        PqAllocation a;
        for (const PqLayerState& l : s.layers) a.k_m.push_back(l.Mk), a.v_m.push_back(l.Mv);
        return a;
    }
    /// Section "pq" of docs/kv-state.md.
    void save_sequence(int seq_id, ByteWriter& out) const override;
    void restore_sequence(int seq_id, ByteReader& in) override;
    /// Sinks, then coded runs split at version and page boundaries, then the f16 tail (window and
    /// tokens waiting for their version); a dense f16 layer is one span.
    std::vector<KvSpan> layout(int seq_id, int il) const override {
        const PqLayerState& l = layer(seq_id, il);
        if (L_.dense[il]) return {KvSpan{0, l.n, -1, -1}};
        std::vector<KvSpan> out;
        const std::int64_t S = std::min<std::int64_t>(p_.sinks, l.n), c = L_.sched.coded(l.n);
        if (S > 0) out.push_back({0, S, -1, -1});
        for (std::int64_t i = 0; i < c;) {
            const int j = L_.sched.version_of(i);
            const std::int64_t b = L_.sched.version_end(j, std::min<std::int64_t>(c, (i / p_.page + 1) * p_.page));
            out.push_back({S + i, b - i, j, i / p_.page});
            i = b;
        }
        if (S + c < l.n) out.push_back({S + c, l.n - S - c, -1, -1});
        return out;
    }

private:
    const PqSequence& sequence(int seq_id) const {
        auto it = seqs_.find(seq_id);
        AQPIM_CHECK(it != seqs_.end(), "kv cache {}: no sequence {}", scheme(), seq_id);
        return it->second;
    }
    const PqLayerState& layer(int seq_id, int il) const {
        AQPIM_CHECK(il >= 0 && il < shape().n_layer, "kv cache {}: layer {} out of range [0, {})", scheme(), il,
                    shape().n_layer);
        return sequence(seq_id).layers[il];
    }
    void release_pages(PqSequence& s) {
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
    /// than the budget. Every layer's growth is reserved when the first layer reaches n1. Free pool
    /// pages it would not reuse are given back first when they are what passes the budget (the code
    /// pages of long sequences that ended cannot hold a short one's f16 rows).
    void charge(const PqSequence& s, int seq_id, int il, std::int64_t n_new, std::int64_t n1);
    /// What the cache would hold once s grows to n1 tokens (its new pages from the free lists first).
    std::uint64_t bytes_after(const PqSequence& s, std::int64_t n1) const;

    void train_version(PqSequence& s, PqLayerState& l, int il, int j);
    /// Codes of positions [c0, c1) (after the sinks) of every stream, blocks of streams side by side.
    void encode(PqSequence& s, PqLayerState& l, std::int64_t c0, std::int64_t c1);
    /// Codes of positions [c0, c1) of one stream: the keys (value = false) or values of KV head ih.
    void encode_stream(const PqSequence& s, const PqLayerState& l, int ih, bool value, std::int64_t c0,
                       std::int64_t c1, Workspace& w) const;
    void release_large_scratch();
    void ensure_pages(std::vector<std::int32_t>& pages, PagePool& pool, std::int64_t n_pages);

    std::uint8_t* code_region(const PqSequence& s, const PqLayerState& l, std::int64_t i, int ih, bool value) const {
        const std::uint8_t* page = code_pool_->page(s.code_pages[std::size_t(i / p_.page)]);
        return const_cast<std::uint8_t*>(page) + (value ? l.v_off : l.k_off)[std::size_t(ih)];
    }
    f16_t* dense_row(const PqSequence& s, int il, std::int64_t t, int ih, bool value) const {
        const std::uint8_t* page = dense_pool_->page(s.dense_pages[std::size_t(t / p_.page)]);
        const std::size_t idx =
            ((std::size_t(L_.slot[il]) * shape().n_kv_head + ih) * 2 + (value ? 1 : 0)) * std::size_t(p_.page) +
            std::size_t(t % p_.page);
        return reinterpret_cast<f16_t*>(const_cast<std::uint8_t*>(page) + idx * L_.row_bytes);
    }

    /// Versions [0, n) of layer l, KV head ih, as the rows of one call read them (into ws.versions).
    void prepare_versions(const PqLayerState& l, int ih, int n, bool many_rows, PqAttendScratch& ws) const;
    void attend_codes(const PqSequence& s, const PqLayerState& l, int ih, const float* q, int group, float scale,
                      std::int64_t c, AttentionPartial& part, Workspace& w) const;
    void attend_dense_layer(const PqSequence& s, int il, int ih, const float* q, int group, float scale, std::int64_t p,
                            AttentionPartial& part, Workspace& w) const;

    // kv state (definitions at the end of the file)
    void save_dense_layer(const PqSequence& s, int il, ByteWriter& out) const;
    void save_coded_layer(const PqSequence& s, const PqLayerState& l, ByteWriter& out) const;
    void restore_dense_layer(PqSequence& s, int il, ByteReader& in);
    void restore_coded_layer(PqSequence& s, int il, ByteReader& in);
    /// Restored code regions of every calibrated layer tile the first s.assigned bytes per token of a page.
    void check_restored_regions(const PqSequence& s, ByteReader& in) const;

    PqKvParams p_;
    PqLayout L_;
    std::uint64_t budget_;
    PqAllocation pinned_;  ///< bits=: m taken instead of chosen, per layer (make_pq_kv_cache with an allocation)
    PqAttentionOptions attn_opts_;
    std::unique_ptr<PagePool> code_pool_, dense_pool_;
    std::map<int, PqSequence> seqs_;
    // training scratch (append is called on one thread; its encode tasks have encode_ws_)
    std::vector<float> xk_, xv_;           ///< [n_kv_heads][rows][D] f32 training rows
    std::vector<std::vector<float>> aug_;  ///< [n_kv_heads] RoPE-augmented key training rows
    ThreadWorkspaces encode_ws_;           ///< the encode tasks' buffers, one per thread
    std::optional<RowCodec> window_codec_; ///< wq=: codec of the tail rows (none: f16)
    // key calibration augmentation (aug=)
    int aug_copies_ = 0;
    std::vector<float> inv_freq_;          ///< [D/2] RoPE pair frequencies
    std::int64_t aug_context_ = 0;         ///< the context the last version's rotations reach (0 = unknown)
};

}  // namespace aqpim::kv
