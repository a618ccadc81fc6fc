// The adaptive PQ KV cache's attention: each call's codebook versions prepared once, the codes of
// every version scanned through the PQ kernels, the sinks and the window dense (docs/kv-pq.md,
// docs/pq-kernels.md).

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "kv/pq_cache.h"
#include "simd/prefetch.h"

namespace aqpim::kv {

/// What every row of one attend() call reads of one codebook version, prepared once per call.
struct PqVersionTables {
    std::vector<float> k_centroids, v_centroids;  ///< [M][ksub][dsub] widened (cb=f16/int8; empty for f32)
    std::vector<float> v_columns;                 ///< [Mv][dsub][16] codebook_columns of the values (empty: per row)
    PqAttentionOptions options;                   ///< the cache's options pointing at the above
};

/// A Workspace part: attend()'s scratch (no allocation once warm).
struct PqAttendScratch {
    AttentionPartial part;
    std::vector<PqCodeSpan> spans, next_spans;  ///< the codes of the version read, of the next one
    std::vector<std::uint8_t> codes;
    std::vector<float> k, v;              ///< decoded rows (attn=decode)
    ProductQuantizer wide_k, wide_v;      ///< a version's quantizers with f16 codebooks widened (attn=decode)
    std::vector<float> tail_k, tail_v;    ///< [rows][D] the call's wq= tail rows widened once
    std::vector<PqVersionTables> versions;  ///< [versions the call reads]

    std::size_t bytes() const {
        std::size_t b = part.bytes() + heap_bytes(spans) +
                        heap_bytes(next_spans) + heap_bytes(codes) + heap_bytes(k) + heap_bytes(v) +
                        wide_k.parameter_bytes() + wide_v.parameter_bytes() + heap_bytes(tail_k) + heap_bytes(tail_v) +
                        heap_bytes(versions);
        for (const PqVersionTables& t : versions)
            b += heap_bytes(t.k_centroids) + heap_bytes(t.v_centroids) + heap_bytes(t.v_columns);
        return b;
    }
};

namespace {

/// Blocks of the next codebook version's codes a decode call requests into L2 while it scans the
/// current version: one tile of the scan (1024 tokens, 32 KiB at M = 32 for keys and values).
constexpr std::int64_t kNextVersionPrefetchBlocks = 32;

}  // namespace

void PqKvCache::prepare_versions(const PqLayerState& l, int ih, int n, bool many_rows, PqAttendScratch& ws) const {
    if (ws.versions.size() < std::size_t(n)) ws.versions.resize(std::size_t(n));
    for (int j = 0; j < n; ++j) {
        const PqLayerVersion& ver = l.versions[std::size_t(j)];
        if (ver.compact() && j + 2 < n) l.versions[std::size_t(j + 2)].prefetch(ih);  // widened here, read here
        PqVersionTables& t = ws.versions[std::size_t(j)];
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

void PqKvCache::attend_codes(const PqSequence& s, const PqLayerState& l, int ih, const float* q, int group, float scale,
                             std::int64_t c, AttentionPartial& part, Workspace& w) const {
    PqAttendScratch& ws = w.get<PqAttendScratch>();
    const std::int64_t P = p_.page;
    const int D = shape().head_dim;
    const int last = L_.sched.version_of(c - 1);
    // Version j's codes as page spans.
    const auto spans_of = [&](int j, std::vector<PqCodeSpan>& spans) {
        spans.clear();
        for (std::int64_t i = L_.sched.version_start(j), b = L_.sched.version_end(j, c); i < b; i = (i / P + 1) * P)
            spans.push_back({code_region(s, l, i, ih, false), code_region(s, l, i, ih, true),
                             std::min(b, (i / P + 1) * P) - i});
    };
    if (p_.attn == PqAttendMode::codes) spans_of(0, ws.spans);
    for (int j = 0; j <= last; ++j) {
        const std::int64_t a = L_.sched.version_start(j), b = L_.sched.version_end(j, c);
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
            attend_pq_spans(q, group, ver.k[ih], ver.v[ih], ws.spans, scale, ws.versions[std::size_t(j)].options, part,
                            &w);
            std::swap(ws.spans, ws.next_spans);
            continue;
        }
        const ProductQuantizer &qk = ver.quantizer(false, ih, ws.wide_k), &qv = ver.quantizer(true, ih, ws.wide_v);
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
        attend_dense_f32(q, group, D, ws.k.data(), ws.v.data(), cnt, scale, part, &w);
    }
}

void PqKvCache::attend_dense_layer(const PqSequence& s, int il, int ih, const float* q, int group, float scale,
                                   std::int64_t p, AttentionPartial& part, Workspace& w) const {
    const std::int64_t P = p_.page;
    for (std::int64_t t = 0; t <= p; t += P) {
        const std::int64_t cnt = std::min(P, p + 1 - t);
        attend_dense_f16(q, group, shape().head_dim, dense_row(s, il, t, ih, false), dense_row(s, il, t, ih, true), cnt,
                         scale, part, &w);
    }
}

void PqKvCache::attend(int il, int seq_id, int ih, const KvQuery& qr) const {
    const PqLayerState& l = layer(seq_id, il);
    const PqSequence& s = sequence(seq_id);
    AQPIM_CHECK(ih >= 0 && ih < shape().n_kv_head, "kv cache {}: KV head {} out of range [0, {})", scheme(), ih,
                shape().n_kv_head);
    AQPIM_CHECK(qr.group >= 1 && qr.n_rows >= 0, "kv cache {}: query group {} and rows {} must be positive", scheme(),
                qr.group, qr.n_rows);
    const int D = shape().head_dim;
    const std::int64_t S = p_.sinks;
    Workspace local;
    Workspace& w = workspace_or(qr.ws, local);
    PqAttendScratch& ws = w.get<PqAttendScratch>();
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
            attend_dense_layer(s, il, ih, q, qr.group, qr.scale, p, part, w);
        } else {
            attend_dense_f16(q, qr.group, D, l.sink_k[ih].data(), l.sink_v[ih].data(), std::min(p + 1, S), qr.scale,
                             part, &w);
            const std::int64_t c = L_.sched.coded(p + 1);
            if (c > 0) attend_codes(s, l, ih, q, qr.group, qr.scale, c, part, w);
            const std::int64_t f = S + c;
            if (p >= f) {
                const std::int64_t cnt = p + 1 - f;
                if (tail_f16) {
                    attend_dense_f16(q, qr.group, D, l.tail_k[ih].f16_row(f), l.tail_v[ih].f16_row(f), cnt, qr.scale,
                                     part, &w);
                } else {  // wq=: the rows widened above
                    const std::size_t off = std::size_t(f - f_lo) * D;
                    attend_dense_f32(q, qr.group, D, ws.tail_k.data() + off, ws.tail_v.data() + off, cnt, qr.scale,
                                     part, &w);
                }
            }
        }
        part.finalize(qr.out + r * qr.out_stride);
    }
}

}  // namespace aqpim::kv
