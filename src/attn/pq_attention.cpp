// Attention of a GQA group over PQ-coded keys and values:
//   per tile of blocks: LUT score scan -> online softmax -> values in the code domain
//   (histogram or register-permute path), then one inverse transform of the value sum.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "aqpim/attention.h"
#include "aqpim/error.h"
#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "attn/attn_tiles.h"
#include "simd/prefetch.h"

namespace aqpim {

namespace {

constexpr std::int64_t kTileBlocks = 32;  // 1024 tokens per tile: 16 KiB of scores for 4 heads
constexpr std::int64_t kTile = kTileBlocks * kCodeBlock;
constexpr std::int64_t kNextTilePrefetchBlocks = 16;  // 8 KiB at M = 32: as far as the scans prefetch ahead
// 8-bit keys are scanned with tables interleaved by four heads (scan_f32_8bit_by4) from this many
// heads on; below it, scan_f32's per-head gathers (see docs/pq-kernels.md).
constexpr int kMinHeadsBy4 = 2;
// With AVX2, from this many tokens in one call, `automatic` takes the pair-histogram value path
// (its 256-bin tables cost a clear and a fold per call; below, the permute path). With AVX-512 the
// permute path is faster at every length (16 lanes per permute). Measured by `aqpim bench pq
// --sections values` (docs/pq-kernels.md).
constexpr std::int64_t kPairsMinTokens = 512;

/// Blocks [0, n_blocks) of one span that fall in one tile.
struct Segment {
    const std::uint8_t* k = nullptr;
    const std::uint8_t* v = nullptr;
    std::int64_t n_blocks = 0;
};

/// A Workspace part: attend_pq_spans's scratch beyond the shared AttentionScratch.
struct SpanScratch {
    AlignedBuffer<std::uint8_t> k_tile, v_tile;  ///< [kTileBlocks][block bytes]: a tile's codes, gathered
    std::vector<Int8LutParams> qparams;          ///< [n_q]
    AlignedBuffer<float> lut4;                   ///< 8-bit key tables interleaved by four heads
    AlignedBuffer<float> pair_hist;              ///< the pairs value path's histograms (pair_hist_floats)
    std::vector<float> lut_columns;              ///< build_lut's key codebooks as columns (lut_columns_floats)
    std::vector<Segment> segments;               ///< the call's spans cut at tile boundaries
    std::vector<std::size_t> tile_first;         ///< [n_tiles + 1] first segment of each tile
    std::vector<float> pattern;                  ///< rescale_interleaved's 16 periods of factors
    AttentionPartial local;

    std::size_t bytes() const {
        return heap_bytes(k_tile) + heap_bytes(v_tile) + heap_bytes(qparams) + heap_bytes(lut4) +
               heap_bytes(pair_hist) + heap_bytes(lut_columns) + heap_bytes(segments) + heap_bytes(tile_first) + heap_bytes(pattern) + local.bytes();
    }
};

/// x[i] *= lane_alpha[i % period] for i < len: histograms whose bins interleave heads. One pattern
/// of 16 periods, so the multiply vectorizes whatever the period (a bin-by-bin loop over the 8-bit
/// histograms' 32K floats at GQA 4 was 7% of a 1 x 32K `pq:bits=2` decode step).
/// `pattern` is the caller's scratch for it.
void rescale_interleaved(float* x, std::size_t len, int period, const float* lane_alpha, std::vector<float>& pattern) {
    const std::size_t P = 16 * std::size_t(period);
    pattern.resize(P);
    for (std::size_t j = 0; j < P; ++j) pattern[j] = lane_alpha[j % std::size_t(period)];
    std::size_t i = 0;
    for (; i + P <= len; i += P)
        for (std::size_t j = 0; j < P; ++j) x[i + j] *= pattern[j];
    for (; i < len; ++i) x[i] *= lane_alpha[i % std::size_t(period)];
}

/// pair_hist (pair_hist_floats(n_q, M) floats) times alpha[h] in head h's lanes.
void rescale_pair_hist(float* pair_hist, int n_q, int M, const float* alpha, std::vector<float>& pattern) {
    const std::size_t per_group = pair_hist_floats(4, M);
    for (int hg = 0; hg < (n_q + 3) / 4; ++hg) {
        float a[4] = {1, 1, 1, 1};
        for (int j = 0; j < 4 && 4 * hg + j < n_q; ++j) a[j] = alpha[4 * hg + j];
        rescale_interleaved(pair_hist + hg * per_group, per_group, 4, a, pattern);
    }
}

}  // namespace

bool bf16_values_here() { return active_simd_level() == SimdLevel::avx512 && cpu_has_avx512_bf16(); }

PqValuePath resolve_value_path(PqValuePath requested, int nbits, std::int64_t n_tokens, bool int8_scores) {
    const bool bf16_here = bf16_values_here();
    if (nbits != 4) {
        AQPIM_CHECK(requested == PqValuePath::automatic || requested == PqValuePath::histogram,
                    "the {} value path needs 4-bit codes (nbits={})", to_string(requested), nbits);
        return PqValuePath::histogram;
    }
    AQPIM_CHECK(requested != PqValuePath::bf16 || bf16_here,
                "the bf16 value path needs AVX512-BF16 at the avx512 kernel level (this CPU: {}, level {})",
                cpu_has_avx512_bf16() ? "has it" : "has not", simd_level_name(active_simd_level()));
    if (requested != PqValuePath::automatic) return requested;
    // Measured by `aqpim bench pq` (values section): see docs/pq-kernels.md.
    if (active_simd_level() == SimdLevel::ref) return PqValuePath::histogram;
    if (active_simd_level() == SimdLevel::avx512) return int8_scores && bf16_here ? PqValuePath::bf16 : PqValuePath::permute;
    return n_tokens >= kPairsMinTokens ? PqValuePath::pairs : PqValuePath::permute;
}

const char* to_string(PqValuePath path) {
    switch (path) {
        case PqValuePath::automatic: return "automatic";
        case PqValuePath::histogram: return "histogram";
        case PqValuePath::permute: return "permute";
        case PqValuePath::pairs: return "pairs";
        case PqValuePath::bf16: return "bf16";
    }
    return "?";
}

void attend_pq(const float* q, int n_q, const ProductQuantizer& pq_k, const ProductQuantizer& pq_v,
               const std::uint8_t* k_blocks, const std::uint8_t* v_blocks, std::int64_t n_tokens, float scale,
               const PqAttentionOptions& options, AttentionPartial& part, Workspace* ws) {
    AQPIM_CHECK(n_tokens >= 0, "negative token count {}", n_tokens);
    const PqCodeSpan span{k_blocks, v_blocks, n_tokens};
    attend_pq_spans(q, n_q, pq_k, pq_v, {&span, 1}, scale, options, part, ws);
}

void attend_pq_spans(const float* q, int n_q, const ProductQuantizer& pq_k, const ProductQuantizer& pq_v,
                     std::span<const PqCodeSpan> spans, float scale, const PqAttentionOptions& options,
                     AttentionPartial& part, Workspace* workspace) {
    AQPIM_CHECK(pq_k.is_trained() && pq_v.is_trained(), "attend_pq needs trained key and value quantizers");
    const int D = pq_k.D();
    AQPIM_CHECK(pq_v.D() == D, "key quantizer has D={}, value quantizer D={}", D, pq_v.D());
    AQPIM_CHECK(n_q >= 1, "attention needs n_q >= 1 (got {})", n_q);
    AQPIM_CHECK(part.n_q == n_q && part.D == D, "attention partial is [{}][{}], expected [{}][{}]", part.n_q, part.D,
                n_q, D);
    std::int64_t n_tokens = 0;
    for (std::size_t i = 0; i < spans.size(); ++i) {
        AQPIM_CHECK(spans[i].n_tokens >= 0, "negative token count {}", spans[i].n_tokens);
        AQPIM_CHECK(i + 1 == spans.size() || spans[i].n_tokens % kCodeBlock == 0,
                    "code span {} of {} holds {} tokens: every span but the last must hold whole blocks of {}", i,
                    spans.size(), spans[i].n_tokens, kCodeBlock);
        n_tokens += spans[i].n_tokens;
    }
    const bool int8 = options.scores == PqScorePath::int8 ||
                      (options.scores == PqScorePath::automatic && pq_k.M() <= 256 &&
                       (pq_k.nbits() == 4 || int8_scores_8bit_fast()));
    AQPIM_CHECK(!int8 || pq_k.M() <= 256, "int8 score tables support M <= 256 (u16 sums), got M={}", pq_k.M());
    AQPIM_CHECK(pq_v.M() <= 1024, "value quantizer M={} exceeds the supported 1024 subspaces", pq_v.M());
    const PqValuePath value_path = resolve_value_path(options.values, pq_v.nbits(), n_tokens, int8);
    const bool by_columns = value_path == PqValuePath::permute || value_path == PqValuePath::bf16;
    if (n_tokens == 0) return;

    const PqKernels& k = pq_kernels();
    const AttnKernels& ak = attn_kernels(active_simd_level());
    const int Mk = pq_k.M(), Mv = pq_v.M(), ksub_k = pq_k.ksub(), ksub_v = pq_v.ksub();
    Workspace own;
    Workspace& w = workspace_or(workspace, own);
    AttentionScratch& ws = w.get<AttentionScratch>();
    SpanScratch& ss = w.get<SpanScratch>();
    ws.reserve(n_q, D, kTile);

    // Query side: transform into key-quantizer space (scale folded in), then tables.
    pq_k.transform_query(q, ws.q.data(), n_q);
    for (std::int64_t i = 0; i < std::int64_t(n_q) * D; ++i) ws.q[i] *= scale;
    if (ws.lut.size() < std::size_t(n_q) * Mk * ksub_k) ws.lut.resize(std::size_t(n_q) * Mk * ksub_k);
    const float* k_cb = options.k_centroids ? options.k_centroids : pq_k.centroids();
    const float* v_cb = options.v_centroids ? options.v_centroids : pq_v.centroids();
    AQPIM_CHECK(k_cb && v_cb, "attend_pq: a quantizer has no codebooks and none were given");
    const std::size_t n_columns = lut_columns_floats(Mk, ksub_k, pq_k.dsub());
    if (ss.lut_columns.size() < n_columns) ss.lut_columns.resize(n_columns);
    k.build_lut(ws.q.data(), n_q, Mk, ksub_k, pq_k.dsub(), k_cb, ws.lut.data(), ss.lut_columns.data());
    const bool by4 = !int8 && pq_k.nbits() == 8 && n_q >= kMinHeadsBy4;
    if (by4) {
        const std::size_t n = std::size_t((n_q + 3) / 4) * Mk * 256 * 4;
        if (ss.lut4.size() < n) ss.lut4.resize(n);
        interleave_luts_by4(ws.lut.data(), n_q, Mk, ss.lut4.data());
    }
    if (int8) {
        if (ws.qlut.size() < std::size_t(n_q) * Mk * ksub_k) ws.qlut.resize(std::size_t(n_q) * Mk * ksub_k);
        ss.qparams.resize(n_q);
        quantize_luts(ws.lut.data(), n_q, Mk, ksub_k, ws.qlut.data(), ss.qparams.data());
    }

    // Value side accumulators (quantizer space of pq_v).
    const std::size_t hist_len = std::size_t(Mv) * ksub_v * n_q;
    const std::size_t pair_len = value_path == PqValuePath::pairs ? pair_hist_floats(n_q, Mv) : 0;
    if (!by_columns) {
        if (ws.hist.size() < hist_len) ws.hist.resize(hist_len);
        std::fill_n(ws.hist.data(), hist_len, 0.0f);
    }
    if (value_path == PqValuePath::pairs) {
        if (ss.pair_hist.size() < pair_len) ss.pair_hist.resize(pair_len);
        std::fill_n(ss.pair_hist.data(), pair_len, 0.0f);
    }
    const float* v_columns = options.v_columns;
    if (by_columns && !v_columns) {
        const std::size_t n_cols = std::size_t(Mv) * pq_v.dsub() * 16;
        if (ws.columns.size() < n_cols) ws.columns.resize(n_cols);
        codebook_columns(v_cb, Mv, pq_v.dsub(), ws.columns.data());
        v_columns = ws.columns.data();
    }
    if (ws.acc.size() < std::size_t(n_q) * D) ws.acc.resize(std::size_t(n_q) * D);
    std::fill_n(ws.acc.data(), std::size_t(n_q) * D, 0.0f);

    // Cut the spans into tiles of kTileBlocks blocks.
    const std::size_t kbb = code_block_bytes(Mk, pq_k.nbits()), vbb = code_block_bytes(Mv, pq_v.nbits());
    ss.segments.clear();
    ss.tile_first.assign(1, 0);
    std::int64_t in_tile = 0;
    for (const PqCodeSpan& sp : spans) {
        const std::int64_t nb = code_blocks_for(sp.n_tokens);
        for (std::int64_t off = 0; off < nb;) {
            const std::int64_t take = std::min(nb - off, kTileBlocks - in_tile);
            ss.segments.push_back({sp.k_blocks + off * kbb, sp.v_blocks + off * vbb, take});
            off += take;
            in_tile += take;
            if (in_tile == kTileBlocks) {
                ss.tile_first.push_back(ss.segments.size());
                in_tile = 0;
            }
        }
    }
    if (in_tile > 0) ss.tile_first.push_back(ss.segments.size());
    const std::size_t n_tiles = ss.tile_first.size() - 1;
    if (ss.v_tile.size() < kTileBlocks * vbb) ss.v_tile.resize(kTileBlocks * vbb);
    if (!int8 && pq_k.nbits() == 8 && ss.segments.size() > 1 && ss.k_tile.size() < kTileBlocks * kbb)
        ss.k_tile.resize(kTileBlocks * kbb);
    // Tile `t`'s codes into L2 ahead of use: all of them when it is made of several spans (short
    // runs the hardware prefetcher does not follow), else its first key blocks (the scan
    // prefetches the rest itself).
    const auto prefetch_tile = [&](std::size_t t) {
        const std::size_t a = ss.tile_first[t], b = ss.tile_first[t + 1];
        if (b - a == 1) {
            prefetch_l2(ss.segments[a].k, std::size_t(std::min(ss.segments[a].n_blocks, kNextTilePrefetchBlocks)) * kbb);
            return;
        }
        for (std::size_t i = a; i < b; ++i) {
            prefetch_l2(ss.segments[i].k, std::size_t(ss.segments[i].n_blocks) * kbb);
            prefetch_l2(ss.segments[i].v, std::size_t(ss.segments[i].n_blocks) * vbb);
        }
    };

    AttentionPartial& local = ss.local;
    local.reset(n_q, D);
    for (std::size_t t = 0; t < n_tiles; ++t) {
        const std::size_t a = ss.tile_first[t], b = ss.tile_first[t + 1];
        if (t + 1 < n_tiles) prefetch_tile(t + 1);
        // The int8 scans (4-bit, and 8-bit at avx512) and the 4-bit f32 scan read the keys in place,
        // segment by segment (they stream them with their own prefetches); the 8-bit f32 scans get
        // the tile's keys gathered into one run (their tables, 4 KiB per subspace, are read once per
        // run of up to 32 blocks, so page-sized runs would read them four times as often). The
        // value codes are copied into the tile buffer: the value pass reads them subspace by
        // subspace, 64 bytes of every block in turn, an order
        // that left a cold 32K call waiting on DRAM for about 1.4 ns per token even with the tile
        // prefetched into L2 up front; sequential copies are streamed by the hardware prefetcher
        // (docs/pq-kernels.md). (Copying keys and values together was 14% of a batch-8 x 32K pq
        // decode step in `perf`, as much as the value pass; keys read in place measured within the
        // VM's noise of gathered ones at batch 32 x 8K, and save the copy. The 8-bit histogram pass
        // reading its value codes in place measured 0.89x / 0.99x the copy's decode rate at 1 / 8 x
        // 32K, `pq:bits=2`, mean of three alternating runs: not taken.)
        const auto scan = [&](const std::uint8_t* kb, std::int64_t n_blocks, float* scores) {
            if (int8)
                k.scan_i8(ws.qlut.data(), ss.qparams.data(), n_q, Mk, pq_k.nbits(), kb, n_blocks, scores, kTile);
            else if (by4)
                k.scan_f32_8bit_by4(ss.lut4.data(), n_q, Mk, kb, n_blocks, scores, kTile);
            else
                k.scan_f32(ws.lut.data(), n_q, Mk, pq_k.nbits(), kb, n_blocks, scores, kTile);
        };
        const bool gather_keys = !int8 && pq_k.nbits() == 8 && b - a > 1;
        std::int64_t nb = 0;
        for (std::size_t i = a; i < b; ++i) {
            const Segment& sg = ss.segments[i];
            std::memcpy(ss.v_tile.data() + nb * vbb, sg.v, std::size_t(sg.n_blocks) * vbb);
            if (gather_keys)
                std::memcpy(ss.k_tile.data() + nb * kbb, sg.k, std::size_t(sg.n_blocks) * kbb);
            else
                scan(sg.k, sg.n_blocks, ws.scores.data() + nb * kCodeBlock);
            nb += sg.n_blocks;
        }
        if (gather_keys) scan(ss.k_tile.data(), nb, ws.scores.data());
        const std::uint8_t* vb = ss.v_tile.data();
        const std::int64_t n_valid = std::min(nb * kCodeBlock, n_tokens - std::int64_t(t) * kTile);
        ak.softmax_tile(ws.scores.data(), kTile, n_q, n_valid, nb * kCodeBlock, local.max.data(), local.sum.data(),
                        ws.alpha.data());
        if (value_path == PqValuePath::histogram) {
            // (the first tile's histogram is still zero: 256-bin histograms are 32K floats at GQA 4)
            if (t > 0 && std::any_of(ws.alpha.begin(), ws.alpha.end(), [](float a) { return a != 1.0f; }))
                rescale_interleaved(ws.hist.data(), hist_len, n_q, ws.alpha.data(), ss.pattern);
            k.values_hist(ws.scores.data(), kTile, n_q, Mv, pq_v.nbits(), vb, nb, ws.hist.data());
        } else if (value_path == PqValuePath::pairs) {
            if (t > 0 && std::any_of(ws.alpha.begin(), ws.alpha.end(), [](float a) { return a != 1.0f; }))
                rescale_pair_hist(ss.pair_hist.data(), n_q, Mv, ws.alpha.data(), ss.pattern);
            k.values_pairs(ws.scores.data(), kTile, n_q, Mv, vb, nb, ss.pair_hist.data());
        } else {
            rescale_rows(ws.acc.data(), n_q, D, ws.alpha.data());
            const auto values = value_path == PqValuePath::bf16 ? k.values_bf16 : k.values_perm;
            values(ws.scores.data(), kTile, n_q, Mv, pq_v.dsub(), vb, nb, v_columns, ws.acc.data());
        }
    }
    if (value_path == PqValuePath::pairs) pair_hist_marginals(ss.pair_hist.data(), n_q, Mv, ws.hist.data());
    if (!by_columns)
        hist_times_codebook(ws.hist.data(), n_q, Mv, ksub_v, pq_v.dsub(), v_cb, ws.acc.data());
    pq_v.inverse(ws.acc.data(), local.acc.data(), n_q);
    part.merge(local);
}

}  // namespace aqpim
