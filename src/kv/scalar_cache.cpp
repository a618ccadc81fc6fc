// Segmented attention of the scalar caches: quantized prefix decoded into f32 tiles, f16 rest.

#include "kv/scalar_cache.h"

#include <algorithm>

#include "aqpim/aligned.h"
#include "aqpim/attention.h"

namespace aqpim::kv {

namespace {

/// A Workspace part: attend_segmented's buffers (no allocation once warm).
struct SegmentScratch {
    AlignedBuffer<float> k, v;                ///< [tile][head_dim] decoded keys, values
    std::vector<AttentionPartial> partials;   ///< [n_rows] one per query row

    std::size_t bytes() const { return heap_bytes(k) + heap_bytes(v) + partials_bytes(partials); }
};

}  // namespace

std::int64_t SegmentedHead::quantized(std::int64_t n) const {
    return n < coded_from ? 0 : std::max<std::int64_t>(0, n - window) / granule * granule;
}

std::int64_t SegmentedHead::quant_end(std::int64_t p) const { return std::min(p + 1, std::max(f16_start, quantized(p + 1))); }

std::int64_t tile_for_granule(std::int64_t granule) { return (255 + granule) / granule * granule; }

void attend_segmented(const SegmentedHead& head, const TileSource& source, const KvQuery& query) {
    const int hd = head.head_dim, group = query.group;
    Workspace local;
    Workspace& w = workspace_or(query.ws, local);
    SegmentScratch& ws = w.get<SegmentScratch>();
    const std::size_t tile_elems = std::size_t(head.tile) * hd;
    if (ws.k.size() < tile_elems) {
        ws.k.resize(tile_elems);
        ws.v.resize(tile_elems);
    }
    if (ws.partials.size() < std::size_t(query.n_rows)) ws.partials.resize(query.n_rows);

    std::int64_t q_max = 0;  // quantized tokens any row reads
    for (int r = 0; r < query.n_rows; ++r) {
        ws.partials[r].reset(group, hd);
        q_max = std::max(q_max, head.quant_end(query.pos[r]));
    }
    for (std::int64_t t0 = 0; t0 < q_max; t0 += head.tile) {
        const std::int64_t n = std::min(head.tile, q_max - t0);
        source.decode_tile(t0, n, ws.k.data(), ws.v.data());
        for (int r = 0; r < query.n_rows; ++r) {
            const std::int64_t end = head.quant_end(query.pos[r]);
            if (end <= t0) continue;
            attend_dense_f32(query.q + r * query.q_stride, group, hd, ws.k.data(), ws.v.data(),
                             std::min(n, end - t0), query.scale, ws.partials[r], &w);
        }
    }
    for (int r = 0; r < query.n_rows; ++r) {
        const std::int64_t p = query.pos[r], end = head.quant_end(p);
        if (end <= p) {
            AQPIM_ASSERT(end >= head.f16_start);
            const std::int64_t off = (end - head.f16_start) * hd;
            attend_dense_f16(query.q + r * query.q_stride, group, hd, head.k16 + off, head.v16 + off, p + 1 - end,
                             query.scale, ws.partials[r], &w);
        }
        ws.partials[r].finalize(query.out + r * query.out_stride);
    }
}

}  // namespace aqpim::kv
