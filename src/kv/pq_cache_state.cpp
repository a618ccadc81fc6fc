// The adaptive PQ KV cache as others read it: the layout the CUDA kernels take (read_view) and the
// kv state of one sequence (section "pq" of docs/kv-state.md).

#include <algorithm>

#include "aqpim/pq_codes.h"
#include "core/int_math.h"
#include "kv/pq_cache.h"
#include "kv/pq_state.h"

namespace aqpim::kv {

// ---- the layout as the CUDA kernels read it ------------------------------------------------------------

PqLayerReadView PqKvCache::read_view(int seq_id, int il) const {
    const PqLayerState& l = layer(seq_id, il);
    const PqSequence& s = sequence(seq_id);
    AQPIM_CHECK(!L_.dense[il], "kv cache {}: layer {} is dense f16, not coded", scheme(), il);
    AQPIM_CHECK(l.n > 0, "kv cache {}: layer {} of sequence {} holds no token", scheme(), il, seq_id);
    AQPIM_CHECK(p_.window_type == "f16", "kv cache {}: the CUDA kernels read the window in f16, not wq={}", scheme(),
                p_.window_type);
    const int n_kv_heads = shape().n_kv_head, D = shape().head_dim;
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
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            ProductQuantizer wide;
            vk.push_back(ver.quantizer(false, ih, wide));
            vv.push_back(ver.quantizer(true, ih, wide));
        }
    }
    // f16 rows: the sinks, then the tail from the first position not read from codes.
    const std::int64_t f = S + c;
    v.n_f16 = S + (l.n - f);
    v.f16_k.resize(n_kv_heads);
    v.f16_v.resize(n_kv_heads);
    for (int ih = 0; ih < n_kv_heads; ++ih) {
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
    const PqSequence& s = sequence(seq_id);
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

void PqKvCache::save_dense_layer(const PqSequence& s, int il, ByteWriter& out) const {
    const std::int64_t n = s.layers[il].n, P = p_.page;
    for (int ih = 0; ih < shape().n_kv_head; ++ih)
        for (const bool value : {false, true})
            for (std::int64_t t = 0; t < n; t += P)  // a page holds rows [t, t + P) contiguously
                out.u16s(dense_row(s, il, t, ih, value), std::size_t(std::min(P, n - t)) * shape().head_dim);
}

void PqKvCache::save_coded_layer(const PqSequence& s, const PqLayerState& l, ByteWriter& out) const {
    const int n_kv_heads = shape().n_kv_head, D = shape().head_dim;
    const std::int64_t S = std::min<std::int64_t>(p_.sinks, l.n), c = L_.sched.coded(l.n), P = p_.page;
    for (int ih = 0; ih < n_kv_heads; ++ih)
        for (const auto* sink : {&l.sink_k[ih], &l.sink_v[ih]}) out.u16s(sink->data(), std::size_t(S) * D);
    out.u32(std::uint32_t(l.versions.size()));
    if (!l.versions.empty())
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            out.u32(std::uint32_t(l.Mk[ih]));
            out.u32(std::uint32_t(l.Mv[ih]));
            out.u64(l.k_off[ih]);
            out.u64(l.v_off[ih]);
        }
    for (const PqLayerVersion& ver : l.versions)
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            write_pq_quantizer(out, ver, false, ih);
            write_pq_quantizer(out, ver, true, ih);
        }
    // Codes of coded indices [0, c): per stream the code blocks of each page, concatenated (pages
    // hold whole blocks), so the bytes do not depend on the page size.
    for (int ih = 0; ih < n_kv_heads && c > 0; ++ih)
        for (const bool value : {false, true}) {
            const int M = (value ? l.Mv : l.Mk)[ih];
            for (std::int64_t i = 0; i < c; i += P)
                out.bytes(code_region(s, l, i, ih, value),
                          std::size_t(code_blocks_for(std::min(P, c - i))) * code_block_bytes(M, p_.nbits));
        }
    // The tail a decode step at the last position reads: rows [sinks + c, n), as stored (f16 or wq=).
    const std::int64_t first = p_.sinks + c;
    for (int ih = 0; ih < n_kv_heads; ++ih)
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
    PqSequence& s = seqs_.find(seq_id)->second;
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

void PqKvCache::restore_dense_layer(PqSequence& s, int il, ByteReader& in) {
    const std::int64_t n = s.layers[il].n, P = p_.page;
    // Pages only for rows the input holds.
    in.require(std::uint64_t(n) * shape().head_dim * 2 * shape().n_kv_head, sizeof(f16_t), "dense f16 layer rows");
    ensure_pages(s.dense_pages, *dense_pool_, ceil_div(n, P));
    for (int ih = 0; ih < shape().n_kv_head; ++ih)
        for (const bool value : {false, true})
            for (std::int64_t t = 0; t < n; t += P)
                read_finite_f16(in, dense_row(s, il, t, ih, value), std::uint64_t(std::min(P, n - t)) * shape().head_dim,
                                fmt::format("layer {} KV head {} f16 {}", il, ih, value ? "values" : "keys"));
}

void PqKvCache::restore_coded_layer(PqSequence& s, int il, ByteReader& in) {
    PqLayerState& l = s.layers[il];
    const int n_kv_heads = shape().n_kv_head, D = shape().head_dim;
    const std::int64_t S = std::min<std::int64_t>(p_.sinks, l.n), c = L_.sched.coded(l.n), P = p_.page;
    const std::string at = fmt::format("layer {}", il);
    for (int ih = 0; ih < n_kv_heads; ++ih)
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
        l.Mk.resize(n_kv_heads);
        l.Mv.resize(n_kv_heads);
        l.k_off.resize(n_kv_heads);
        l.v_off.resize(n_kv_heads);
        const std::vector<int> ck = pq_m_candidates(p_, shape(), true), cv = pq_m_candidates(p_, shape(), false);
        const std::uint64_t region_end = std::uint64_t(L_.width) * std::uint64_t(P);
        l.token_bytes = 0;
        for (int ih = 0; ih < n_kv_heads; ++ih) {
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
    for (int ih = 0; ih < n_kv_heads && c > 0; ++ih)
        code_bytes += std::uint64_t(code_blocks_for(c)) *
                      (code_block_bytes(l.Mk[ih], p_.nbits) + code_block_bytes(l.Mv[ih], p_.nbits));
    in.require(code_bytes, 1, at + " codes");
    if (c > 0) ensure_pages(s.code_pages, *code_pool_, ceil_div(c, P));
    for (int ih = 0; ih < n_kv_heads && c > 0; ++ih)  // c > 0: version 0 is trained (the count was checked)
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
    for (int ih = 0; ih < n_kv_heads; ++ih)
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

void PqKvCache::check_restored_regions(const PqSequence& s, ByteReader& in) const {
    std::vector<std::pair<std::size_t, std::size_t>> regions;  // [begin, end) bytes of a page
    const std::size_t P = std::size_t(p_.page);
    for (int il = 0; il < shape().n_layer; ++il) {
        const PqLayerState& l = s.layers[il];
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

}  // namespace aqpim::kv
