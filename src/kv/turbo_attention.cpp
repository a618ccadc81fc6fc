// Attention of the turbo / qjl cache without decoding to the original coordinates: each query row is
// rotated (and sketched) once, coded key rows are scored as dot products of extended rows, values
// are summed in their rotated coordinates and rotated back once per row, then the f16 tokens are
// attended densely in the original coordinates and merged (the online softmax state carries over).

#include <algorithm>

#include "aqpim/aligned.h"
#include "aqpim/attention.h"
#include "attn/attn_tiles.h"
#include "kv/turbo_cache.h"

namespace aqpim::kv {

namespace {

constexpr std::int64_t kTile = 128;  ///< coded tokens decoded at once (tiles start at multiples of it)

/// A Workspace part: attend_turbo's buffers, reused across calls.
struct TurboScratch {
    AlignedBuffer<float> q_ext;    ///< [n_rows][group][key ext_dim] prepared queries, times scale
    AlignedBuffer<float> k_ext;    ///< [kTile][key ext_dim] extended key rows
    AlignedBuffer<float> v;        ///< [kTile][head_dim] value rows (rotated for TurboQuant values)
    AlignedBuffer<float> scores;   ///< [group][kTile] scores, then softmax weights
    std::vector<float> alpha;      ///< [group]
    std::vector<float> acc;        ///< [group][head_dim] one row's values rotated back
    std::vector<AttentionPartial> partials;  ///< [n_rows]

    template <class T>
    static void grow(T& b, std::size_t n) {
        if (b.size() < n) b.resize(n);
    }
    std::size_t bytes() const {
        return heap_bytes(q_ext) + heap_bytes(k_ext) + heap_bytes(v) + heap_bytes(scores) + heap_bytes(alpha) +
               heap_bytes(acc) + partials_bytes(partials);
    }
};

}  // namespace

void attend_turbo(const TurboStreamCoder& keys, const TurboValueCodec& values, const TurboHeadView& head,
                  const KvQuery& query) {
    const SegmentedHead& seg = head.segments;
    const int hd = seg.head_dim, group = query.group, ke = keys.ext_dim();
    const std::size_t krb = keys.row_bytes().total(), vrb = values.row_bytes();
    const AttnKernels& kern = attn_kernels(active_simd_level());
    Workspace local;
    Workspace& w = workspace_or(query.ws, local);
    TurboScratch& ws = w.get<TurboScratch>();
    TurboScratch::grow(ws.q_ext, std::size_t(query.n_rows) * group * ke);
    TurboScratch::grow(ws.k_ext, std::size_t(kTile) * ke);
    TurboScratch::grow(ws.v, std::size_t(kTile) * hd);
    TurboScratch::grow(ws.scores, std::size_t(group) * kTile);
    TurboScratch::grow(ws.acc, std::size_t(group) * hd);
    ws.alpha.resize(group);
    if (ws.partials.size() < std::size_t(query.n_rows)) ws.partials.resize(query.n_rows);

    std::int64_t q_max = 0;  // coded tokens any row reads
    for (int r = 0; r < query.n_rows; ++r) {
        ws.partials[r].reset(group, hd);
        const std::int64_t end = seg.quant_end(query.pos[r]);
        q_max = std::max(q_max, end);
        if (end == 0) continue;
        for (int g = 0; g < group; ++g) {
            float* qe = ws.q_ext.data() + (std::size_t(r) * group + g) * ke;
            keys.prepare_query(query.q + r * query.q_stride + g * hd, head.k_channels, qe);
            for (int i = 0; i < ke; ++i) qe[i] *= query.scale;
        }
    }
    for (std::int64_t t0 = 0; t0 < q_max; t0 += kTile) {
        const std::int64_t n = std::min(kTile, q_max - t0);
        keys.decode_ext(head.k_rows + std::size_t(t0) * krb, n, ws.k_ext.data());
        values.decode_tile(head.v_rows + std::size_t(t0) * vrb, n, ws.v.data());
        for (int r = 0; r < query.n_rows; ++r) {
            const std::int64_t end = seg.quant_end(query.pos[r]);
            if (end <= t0) continue;
            const std::int64_t nv = std::min(n, end - t0);
            AttentionPartial& part = ws.partials[r];
            kern.dense_scores_f32(ws.q_ext.data() + std::size_t(r) * group * ke, group, ke, ws.k_ext.data(), nv,
                                  ws.scores.data(), kTile);
            kern.softmax_tile(ws.scores.data(), kTile, group, nv, nv, part.max.data(), part.sum.data(), ws.alpha.data());
            rescale_rows(part.acc.data(), group, hd, ws.alpha.data());
            kern.dense_values_f32(ws.scores.data(), kTile, group, hd, ws.v.data(), nv, part.acc.data());
        }
    }
    for (int r = 0; r < query.n_rows; ++r) {
        AttentionPartial& part = ws.partials[r];
        const std::int64_t p = query.pos[r], end = seg.quant_end(p);
        if (values.rotated() && end > 0) {  // the coded tokens' values back to the original coordinates
            for (int g = 0; g < group; ++g) values.turbo()->unrotate(part.acc.data() + g * hd, head.v_channels, ws.acc.data() + g * hd);
            std::copy(ws.acc.begin(), ws.acc.begin() + std::ptrdiff_t(group) * hd, part.acc.begin());
        }
        if (end <= p) {
            AQPIM_ASSERT(end >= seg.f16_start);
            const std::int64_t off = (end - seg.f16_start) * hd;
            attend_dense_f16(query.q + r * query.q_stride, group, hd, seg.k16 + off, seg.v16 + off, p + 1 - end,
                             query.scale, part, &w);
        }
        part.finalize(query.out + r * query.out_stride);
    }
}

}  // namespace aqpim::kv
