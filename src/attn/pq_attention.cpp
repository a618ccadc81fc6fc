// Attention of a GQA group over PQ-coded keys and values:
//   per tile of blocks: LUT score scan -> online softmax -> values in the code domain
//   (histogram or register-permute path), then one inverse transform of the value sum.

#include <algorithm>
#include <cmath>
#include <limits>

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



}  // namespace

PqValuePath resolve_value_path(PqValuePath requested, int nbits) {
    if (nbits != 4) {
        AQPIM_CHECK(requested != PqValuePath::permute, "the permute value path needs 4-bit codes (nbits={})", nbits);
        return PqValuePath::histogram;
    }
    if (requested != PqValuePath::automatic) return requested;
    // Measured by `aqpim bench pq` (values section): see docs/pq-kernels.md.
    return active_simd_level() == SimdLevel::ref ? PqValuePath::histogram : PqValuePath::permute;
}

void attend_pq(const float* q, int n_q, const ProductQuantizer& pq_k, const ProductQuantizer& pq_v,
               const std::uint8_t* k_blocks, const std::uint8_t* v_blocks, std::int64_t n_tokens, float scale,
               const PqAttentionOptions& options, AttentionPartial& part) {
    AQPIM_CHECK(pq_k.is_trained() && pq_v.is_trained(), "attend_pq needs trained key and value quantizers");
    const int D = pq_k.D();
    AQPIM_CHECK(pq_v.D() == D, "key quantizer has D={}, value quantizer D={}", D, pq_v.D());
    AQPIM_CHECK(n_q >= 1, "attention needs n_q >= 1 (got {})", n_q);
    AQPIM_CHECK(part.n_q == n_q && part.D == D, "attention partial is [{}][{}], expected [{}][{}]", part.n_q, part.D,
                n_q, D);
    AQPIM_CHECK(n_tokens >= 0, "negative token count {}", n_tokens);
    const bool int8 = options.scores == PqScorePath::int8;
    AQPIM_CHECK(!int8 || pq_k.nbits() == 4, "int8 score tables need 4-bit key codes (nbits={})", pq_k.nbits());
    AQPIM_CHECK(!int8 || pq_k.M() <= 256, "int8 score tables support M <= 256 (u16 sums), got M={}", pq_k.M());
    AQPIM_CHECK(pq_v.M() <= 1024, "value quantizer M={} exceeds the supported 1024 subspaces", pq_v.M());
    const PqValuePath value_path = resolve_value_path(options.values, pq_v.nbits());
    if (n_tokens == 0) return;

    const PqKernels& k = pq_kernels();
    const AttnKernels& ak = attn_kernels(active_simd_level());
    const int Mk = pq_k.M(), Mv = pq_v.M(), ksub_k = pq_k.ksub(), ksub_v = pq_v.ksub();
    AttentionScratch& ws = attention_scratch();
    ws.reserve(n_q, D, kTile);

    // Query side: transform into key-quantizer space (scale folded in), then tables.
    pq_k.transform_query(q, ws.q.data(), n_q);
    for (std::int64_t i = 0; i < std::int64_t(n_q) * D; ++i) ws.q[i] *= scale;
    if (ws.lut.size() < std::size_t(n_q) * Mk * ksub_k) ws.lut.resize(std::size_t(n_q) * Mk * ksub_k);
    k.build_lut(ws.q.data(), n_q, Mk, ksub_k, pq_k.dsub(), pq_k.centroids(), ws.lut.data());
    std::vector<Int8LutParams> qparams;
    if (int8) {
        if (ws.qlut.size() < std::size_t(n_q) * Mk * 16) ws.qlut.resize(std::size_t(n_q) * Mk * 16);
        qparams.resize(n_q);
        quantize_luts(ws.lut.data(), n_q, Mk, ws.qlut.data(), qparams.data());
    }

    // Value side accumulators (quantizer space of pq_v).
    const std::size_t hist_len = std::size_t(Mv) * ksub_v * n_q;
    if (value_path == PqValuePath::histogram) {
        if (ws.hist.size() < hist_len) ws.hist.resize(hist_len);
        std::fill_n(ws.hist.data(), hist_len, 0.0f);
    } else {
        const std::size_t n_cols = std::size_t(Mv) * pq_v.dsub() * 16;
        if (ws.columns.size() < n_cols) ws.columns.resize(n_cols);
        codebook_columns(pq_v.centroids(), Mv, pq_v.dsub(), ws.columns.data());
    }
    if (ws.acc.size() < std::size_t(n_q) * D) ws.acc.resize(std::size_t(n_q) * D);
    std::fill_n(ws.acc.data(), std::size_t(n_q) * D, 0.0f);

    AttentionPartial local(n_q, D);
    const std::int64_t n_blocks = code_blocks_for(n_tokens);
    const std::size_t kbb = code_block_bytes(Mk, pq_k.nbits()), vbb = code_block_bytes(Mv, pq_v.nbits());
    for (std::int64_t b0 = 0; b0 < n_blocks; b0 += kTileBlocks) {
        const std::int64_t nb = std::min(kTileBlocks, n_blocks - b0);
        const std::int64_t n_valid = std::min(nb * kCodeBlock, n_tokens - b0 * kCodeBlock);
        // This tile's value codes come in while its keys are scanned: the value pass reads them in
        // subspace-strided order, which the hardware prefetcher does not follow from DRAM. (The
        // scan prefetches the keys itself.)
        prefetch_l2(v_blocks + b0 * vbb, std::size_t(nb) * vbb);
        if (int8)
            k.scan_i8(ws.qlut.data(), qparams.data(), n_q, Mk, k_blocks + b0 * kbb, nb, ws.scores.data(), kTile);
        else
            k.scan_f32(ws.lut.data(), n_q, Mk, pq_k.nbits(), k_blocks + b0 * kbb, nb, ws.scores.data(), kTile);
        ak.softmax_tile(ws.scores.data(), kTile, n_q, n_valid, nb * kCodeBlock, local.max.data(), local.sum.data(),
                        ws.alpha.data());
        if (value_path == PqValuePath::histogram) {
            if (std::any_of(ws.alpha.begin(), ws.alpha.end(), [](float a) { return a != 1.0f; }))
                for (std::size_t i = 0; i < hist_len; ++i) ws.hist[i] *= ws.alpha[i % n_q];
            k.values_hist(ws.scores.data(), kTile, n_q, Mv, pq_v.nbits(), v_blocks + b0 * vbb, nb, ws.hist.data());
        } else {
            rescale_rows(ws.acc.data(), n_q, D, ws.alpha.data());
            k.values_perm(ws.scores.data(), kTile, n_q, Mv, pq_v.dsub(), v_blocks + b0 * vbb, nb, ws.columns.data(),
                          ws.acc.data());
        }
    }
    if (value_path == PqValuePath::histogram)
        hist_times_codebook(ws.hist.data(), n_q, Mv, ksub_v, pq_v.dsub(), pq_v.centroids(), ws.acc.data());
    pq_v.inverse(ws.acc.data(), local.acc.data(), n_q);
    part.merge(local);
}

}  // namespace aqpim
