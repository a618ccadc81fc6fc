// The adaptive PQ KV cache: f16 sinks, coded pages per codebook version, f16 window and
// pre-calibration tokens, dense f16 layers (design: docs/kv-pq.md). This file: budget, append,
// training and coding of versions, accounting, construction.

#include "kv/pq_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "aqpim/kmeans.h"
#include "aqpim/pq_codes.h"
#include "aqpim/threads.h"
#include "core/int_math.h"
#include "pq/anisotropic_codes.h"

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

constexpr double kAugSpanUnknownContext = 4096;  // positions the last version's key rotations reach when no context is stated
/// append() encodes in tasks of this many positions of one stream (a multiple of kCodeBlock)...
constexpr std::int64_t kEncodeBlockTokens = 64;
/// ...side by side on the pool's threads from this many rows (positions x streams) in one call: a
/// decode step's one or two tokens are cheaper than waking a thread.
constexpr std::int64_t kParallelAppendRows = 64;
static_assert(kEncodeBlockTokens % kCodeBlock == 0);

/// A Workspace part: an encode task's buffers (a block of tokens at a time: small).
struct EncodeScratch {
    std::vector<float> rows;             ///< [tokens][D] the stream's rows read back
    std::vector<std::uint8_t> codes;     ///< [tokens][M]
    AlignedBuffer<float> y;              ///< ProductQuantizer::encode_with's rows in quantizer space
    std::vector<float> wide_centroids;   ///< cb=f16/int8: the quantizer's codebooks widened
    std::vector<float> norms;            ///< their squared norms

    std::size_t bytes() const {
        return heap_bytes(rows) + heap_bytes(codes) + heap_bytes(y) + heap_bytes(wide_centroids) + heap_bytes(norms);
    }
};

}  // namespace

// ---- budget ------------------------------------------------------------------------------------------

std::uint64_t PqKvCache::bytes_after(const PqSequence& s, std::int64_t n1) const {
    std::uint64_t after = footprint(n1);
    for (const auto& [id, o] : seqs_)
        if (&o != &s) after += footprint(o.n_max);
    // New pages come from the free list first; the free pages left stay held.
    if (code_pool_) {
        const std::int64_t need = ceil_div(L_.sched.coded(n1), p_.page) - std::int64_t(s.code_pages.size());
        after += std::uint64_t(std::max<std::int64_t>(0, code_pool_->n_free() - std::max<std::int64_t>(need, 0))) *
                 code_pool_->page_bytes();
    }
    if (dense_pool_) {
        const std::int64_t need = ceil_div(n1, p_.page) - std::int64_t(s.dense_pages.size());
        after += std::uint64_t(std::max<std::int64_t>(0, dense_pool_->n_free() - std::max<std::int64_t>(need, 0))) *
                 dense_pool_->page_bytes();
    }
    return after;
}

void PqKvCache::charge(const PqSequence& s, int seq_id, int il, std::int64_t n_new, std::int64_t n1) {
    if (budget_ == 0 || n1 <= s.n_max) return;
    std::uint64_t after = bytes_after(s, n1);
    if (after > budget_ && free_pool_bytes() > 0) {
        if (code_pool_) code_pool_->release_free();
        if (dense_pool_) dense_pool_->release_free();
        after = bytes_after(s, n1);
    }
    AQPIM_CHECK(after <= budget_,
                "kv cache {}: appending {} tokens to layer {} of sequence {} (to {} tokens) needs {} bytes in all, over "
                "the memory budget of {} bytes (holding {} bytes now)",
                scheme(), n_new, il, seq_id, n1, after, budget_, [&] {  // what it holds: counted only to refuse
                    std::uint64_t now = free_pool_bytes();
                    for (const auto& [id, o] : seqs_) now += footprint(o.n_max);
                    return now;
                }());
}

void PqKvCache::ensure_pages(std::vector<std::int32_t>& pages, PagePool& pool, std::int64_t n_pages) {
    while (std::int64_t(pages.size()) < n_pages) pages.push_back(pool.allocate());
}

// ---- append ------------------------------------------------------------------------------------------

void PqKvCache::append(int il, int seq_id, std::int64_t n, const float* k, const float* v) {
    AQPIM_CHECK(n >= 0, "kv cache {}: cannot append {} tokens", scheme(), n);
    layer(seq_id, il);  // validates
    PqSequence& s = seqs_.find(seq_id)->second;
    PqLayerState& l = s.layers[il];
    if (n == 0) return;
    const int n_kv_heads = shape().n_kv_head, D = shape().head_dim;
    // Rows are stored as f16 (or straight from f32 in the wq= codec) and everything (training, codes,
    // attention) reads the stored values, so a token is coded the same whichever call appended it.
    for (auto [x, what] : {std::pair{k, "key"}, std::pair{v, "value"}}) {
        const std::int64_t i = first_outside_f16(x, n * n_kv_heads * D);
        if (i >= 0)
            AQPIM_FAIL("kv cache {}: {} of token {} (KV head {}, dim {}) of layer {} is {}: not a finite f16 value",
                       scheme(), what, l.n + i / (n_kv_heads * D), (i / D) % n_kv_heads, i % D, il, x[i]);
    }
    const std::int64_t n0 = l.n, n1 = n0 + n;
    charge(s, seq_id, il, n, n1);
    const std::int64_t row_stride = std::int64_t(n_kv_heads) * D;

    if (L_.dense[il]) {
        ensure_pages(s.dense_pages, *dense_pool_, ceil_div(n1, p_.page));
        for (std::int64_t t = n0; t < n1; ++t)
            for (int ih = 0; ih < n_kv_heads; ++ih) {
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
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            l.sink_k[ih].resize(std::size_t(std::min(n1, S)) * D);
            l.sink_v[ih].resize(std::size_t(std::min(n1, S)) * D);
        }
    for (std::int64_t t = n0; t < std::min(n1, S); ++t)
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            const std::int64_t src = (t - n0) * row_stride + ih * D;
            f32_to_fp16(k + src, l.sink_k[ih].data() + t * D, std::size_t(D));
            f32_to_fp16(v + src, l.sink_v[ih].data() + t * D, std::size_t(D));
        }
    const std::int64_t t0 = std::max(n0, S);
    if (n1 > t0)  // each stream on its own (wq= codes them): side by side when there are many rows
        parallel_for(
            2 * n_kv_heads,
            [&](std::int64_t stream) {
                const int ih = int(stream % n_kv_heads);
                const float* src = (stream < n_kv_heads ? k : v) + (t0 - n0) * row_stride + ih * D;
                (stream < n_kv_heads ? l.tail_k : l.tail_v)[ih].push(src, n1 - t0, row_stride);
            },
            (n1 - t0) * 2 * n_kv_heads >= kParallelAppendRows ? 0 : 1);

    // 2. Codebook versions whose training point falls in this append.
    const PqSchedule& sc = L_.sched;
    for (int j = int(l.versions.size()); j < sc.versions_trained(n1 - S); ++j) train_version(s, l, il, j);

    // 3. Codes of the tokens rows from now on read as codes.
    const std::int64_t c0 = sc.coded(n0), c1 = sc.coded(n1);
    if (c1 > c0) {
        ensure_pages(s.code_pages, *code_pool_, ceil_div(c1, p_.page));
        encode(s, l, c0, c1);
    }

    // 4. Keep the f16 rows the rows of this step read (from the first one's), drop the rest.
    const std::int64_t keep = S + sc.coded(n0 + 1);
    for (int ih = 0; ih < n_kv_heads; ++ih) {
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

void PqKvCache::train_version(PqSequence& s, PqLayerState& l, int il, int j) {
    const int n_kv_heads = shape().n_kv_head, D = shape().head_dim;
    const std::int64_t nt = L_.sched.n_train, first = p_.sinks + L_.sched.version_start(j);
    const std::size_t per = std::size_t(nt) * D;
    xk_.resize(per * n_kv_heads);
    xv_.resize(per * n_kv_heads);
    std::vector<const float*> pk(n_kv_heads), pv(n_kv_heads);
    for (int ih = 0; ih < n_kv_heads; ++ih) {
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
        aug_.resize(std::size_t(n_kv_heads));
        parallel_for(n_kv_heads, [&](std::int64_t h) {  // each head from its own seed
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
        for (int ih = 0; ih < n_kv_heads; ++ih)
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
        l.Mk.assign(n_kv_heads, L_.Mk);
        l.Mv.assign(n_kv_heads, L_.Mv);
        v0 = train_pq_layer_version(p_, shape(), l.Mk, l.Mv, tk, tv);
    }
    v0.keep_counted_only(p_.codebooks);
    add_version(l, std::move(v0));
    const std::size_t P = std::size_t(p_.page);
    std::size_t off = s.assigned * P;
    l.k_off.resize(n_kv_heads);
    l.v_off.resize(n_kv_heads);
    for (int ih = 0; ih < n_kv_heads; ++ih) {
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

void PqKvCache::encode(PqSequence& s, PqLayerState& l, std::int64_t c0, std::int64_t c1) {
    if (c1 <= c0) return;
    const int n_kv_heads = shape().n_kv_head, n_streams = 2 * n_kv_heads;
    // Tasks: one stream (a KV head's keys or values) of one aligned block of kEncodeBlockTokens
    // positions, so no two tasks write the same code block (4-bit codes share bytes within one).
    const std::int64_t b0 = c0 / kEncodeBlockTokens, n_blocks = (c1 - 1) / kEncodeBlockTokens + 1 - b0;
    const std::int64_t n_tasks = n_blocks * n_streams;
    const int n_threads = (c1 - c0) * n_streams >= kParallelAppendRows ? 0 : 1;
    encode_ws_.prepare(n_threads);
    parallel_for(
        n_tasks,
        [&](std::int64_t task) {
            const std::int64_t blk = b0 + task / n_streams;
            const int stream = int(task % n_streams);
            encode_stream(s, l, stream % n_kv_heads, stream >= n_kv_heads, std::max(c0, blk * kEncodeBlockTokens),
                          std::min(c1, (blk + 1) * kEncodeBlockTokens), encode_ws_.mine());
        },
        n_threads);
}

void PqKvCache::encode_stream(const PqSequence& s, const PqLayerState& l, int ih, bool value, std::int64_t c0,
                              std::int64_t c1, Workspace& w) const {
    const int D = shape().head_dim, nbits = p_.nbits;
    const std::int64_t S = p_.sinks, P = p_.page;
    EncodeScratch& ws = w.get<EncodeScratch>();
    for (std::int64_t a = c0; a < c1;) {
        // A run coded by one version.
        const int j = L_.sched.version_of(a);
        const std::int64_t b = L_.sched.version_end(j, c1);
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
        if (!value) refine_codes_anisotropic(q, centroids, ws.rows.data(), cnt, p_.aniso, ws.codes.data(), 4, &w);
        for (std::int64_t i = a; i < b; ++i)
            store_token_code(code_region(s, l, i, ih, value), i % P, M, nbits, ws.codes.data() + (i - a) * M);
        a = b;
    }
}

// ---- accounting --------------------------------------------------------------------------------------

std::size_t PqKvCache::scratch_bytes() const {
    std::size_t b = heap_bytes(xk_) + heap_bytes(xv_) + heap_bytes(aug_) + encode_ws_.bytes();
    for (const std::vector<float>& a : aug_) b += heap_bytes(a);
    return b;
}

KvMemory PqKvCache::memory() const {
    PqParts parts;
    std::int64_t n_tokens = 0;
    const std::uint64_t n_kv_heads = std::uint64_t(shape().n_kv_head), row = L_.row_bytes, tail_row = L_.tail_row_bytes;
    parts.window_type = p_.window_type;
    for (const auto& [id, s] : seqs_) {
        n_tokens += s.n_max;
        for (int il = 0; il < shape().n_layer; ++il) {
            const PqLayerState& l = s.layers[il];
            if (L_.dense[il]) {
                parts.dense += std::uint64_t(l.n) * n_kv_heads * 2 * row;
                continue;
            }
            const std::int64_t c = parts.add_layer_rows(L_.sched, l.n, n_kv_heads * 2, row, tail_row);
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
    const std::size_t n_layer = std::size_t(shape.n_layer), n_kv_heads = std::size_t(shape.n_kv_head);
    AQPIM_CHECK(pinned.k_m.size() <= n_layer && pinned.v_m.size() == pinned.k_m.size(),
                "pinned pq allocation: {} key and {} value layers for a model of {}", pinned.k_m.size(),
                pinned.v_m.size(), n_layer);
    for (std::size_t il = 0; il < pinned.k_m.size(); ++il) {
        const std::vector<int>&mk = pinned.k_m[il], &mv = pinned.v_m[il];
        if (mk.empty() && mv.empty()) continue;
        AQPIM_CHECK(mk.size() == n_kv_heads && mv.size() == n_kv_heads, "pinned pq allocation: layer {} names {} key and {} value "
                    "heads, the model has {}", il, mk.size(), mv.size(), n_kv_heads);
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
