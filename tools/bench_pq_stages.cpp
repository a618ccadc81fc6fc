// `aqpim bench pq --sections stages`: one GQA-group attention call on 4-bit codes (and 8-bit) cut into the
// stages attend_pq_spans runs (src/attn/pq_attention.cpp), each timed alone on the data it sees,
// beside the whole call in the same run. docs/pq-kernels.md sets each figure against its bound.
//   per tile of 1024 tokens (ns per token): key scan (exact f32 or int8 tables), softmax, values
//   (register permute or pair histograms);
//   per call (us): query transform and tables, int8 tables, codebook columns, clearing and folding
//   the pair histograms, histogram x codebook, inverse transform;
//   then the same for 8-bit codes at the same bytes (M = 16): tables, the by-4-heads and int8 key
//   scans, the value histogram, and the whole call with either score path.
// A tile stage's row also gives the bytes it reads and writes per token outside its registers and
// tables (codes, scores, weights) and that rate: the whole call counts its key and value codes, as
// the attention section does.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/attention.h"
#include "aqpim/bench_util.h"
#include "aqpim/pq.h"
#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "aqpim/simd.h"
#include "bench.h"

namespace aqpim::cli {

using json = nlohmann::ordered_json;

namespace {

constexpr int kD = 128, kGroup = 4, kM = 32;
constexpr std::int64_t kTile = 1024;  // attend_pq_spans' tile

}  // namespace

json bench_stages(const BenchOptions& opt) {
    json rows = json::array();
    const double min_s = opt.quick ? 0.03 : 0.2;
    const int reps = opt.quick ? 2 : 3;
    const ProductQuantizer pq_k = bench_pq(kM, 4, 1), pq_v = bench_pq(kM, 4, 2);
    const int dsub = kD / kM;
    const std::int64_t nb = kTile / kCodeBlock;
    const std::size_t bb = code_block_bytes(kM, 4);
    std::vector<std::uint8_t> kcodes(nb * bb), vcodes(nb * bb);
    for (std::size_t i = 0; i < kcodes.size(); ++i) {
        kcodes[i] = std::uint8_t(i * 2654435761u >> 13);
        vcodes[i] = std::uint8_t(i * 40503u >> 7);
    }
    std::vector<float> q(kGroup * kD), qy(kGroup * kD), lut(std::size_t(kGroup) * kM * 16);
    std::vector<float> lut_columns(lut_columns_floats(1, 256, kD));  // the widest tables below (8-bit codes)
    for (int i = 0; i < kGroup * kD; ++i) q[i] = std::sin(0.37f * i);
    std::vector<std::uint8_t> qlut(lut.size());
    std::vector<Int8LutParams> qprm(kGroup);
    AlignedBuffer<float> scores(std::size_t(kGroup) * kTile), p(std::size_t(kGroup) * kTile);
    std::vector<float> cols(std::size_t(kM) * dsub * 16), hist(std::size_t(kM) * 16 * kGroup);
    std::vector<float> acc(kGroup * kD), out(kGroup * kD), pairs(pair_hist_floats(kGroup, kM));
    float mx[kGroup], sm[kGroup], alpha[kGroup];
    const PqKernels& k = pq_kernels();
    const AttnKernels& ak = attn_kernels(active_simd_level());

    // Per token: the key or value codes of one token, and the scores (or weights) of its GQA group.
    const double code_bytes = double(bb) / kCodeBlock, score_bytes = double(kGroup) * sizeof(float);
    auto row = [&](const char* stage, const char* per, double seconds, double bytes_per_token = 0, int M = kM,
                   int nbits = 4) {
        const bool per_tile = std::string(per) == "tile";
        json r = {{"section", "stages"}, {"stage", stage}, {"per", per},
                  {"case", fmt::format("GQA {} heads, M={}, {}-bit, D={}", kGroup, M, nbits, kD)},
                  {"simd", simd_level_name(active_simd_level())}, {"threads", 1}};
        if (per_tile) {
            const double ns = seconds / double(kTile) * 1e9;
            r["ns_per_token"] = ns;
            if (bytes_per_token > 0) {
                r["bytes_per_token"] = bytes_per_token;
                r["gbytes_per_s"] = bytes_per_token / ns;
            }
        } else
            r["us_per_call"] = seconds * 1e6;
        rows.push_back(r);
    };
    auto time = [&](const std::function<void()>& fn) {
        return time_per_call([&](std::int64_t) { fn(); }, min_s, reps);
    };

    // Per call, query side.
    row("query transform + f32 tables", "call", time([&] {
            pq_k.transform_query(q.data(), qy.data(), kGroup);
            k.build_lut(qy.data(), kGroup, kM, 16, dsub, pq_k.centroids(), lut.data(), lut_columns.data());
        }));
    row("int8 tables", "call", time([&] { quantize_luts(lut.data(), kGroup, kM, 16, qlut.data(), qprm.data()); }));
    // Per tile.
    row("scan, f32 tables", "tile",
        time([&] { k.scan_f32(lut.data(), kGroup, kM, 4, kcodes.data(), nb, scores.data(), kTile); }),
        code_bytes + score_bytes);
    row("scan, int8 tables", "tile",
        time([&] { k.scan_i8(qlut.data(), qprm.data(), kGroup, kM, 4, kcodes.data(), nb, scores.data(), kTile); }),
        code_bytes + score_bytes);
    row("softmax", "tile", time([&] {
            std::copy(scores.data(), scores.data() + scores.size(), p.data());
            std::fill_n(mx, kGroup, -INFINITY);
            std::fill_n(sm, kGroup, 0.0f);
            ak.softmax_tile(p.data(), kTile, kGroup, kTile, kTile, mx, sm, alpha);
        }),
        4 * score_bytes);  // the copy's read and write, the softmax's read and write
    row("copy of the scores (in the softmax row)", "tile",
        time([&] { std::copy(scores.data(), scores.data() + scores.size(), p.data()); }), 2 * score_bytes);
    row("values, register permute", "tile",
        time([&] { k.values_perm(p.data(), kTile, kGroup, kM, dsub, vcodes.data(), nb, cols.data(), acc.data()); }),
        code_bytes + score_bytes);
    if (bf16_values_here())
        row("values, bf16 pairs of tokens", "tile",
            time([&] { k.values_bf16(p.data(), kTile, kGroup, kM, dsub, vcodes.data(), nb, cols.data(), acc.data()); }),
            code_bytes + score_bytes);
    row("values, pair histograms", "tile",
        time([&] { k.values_pairs(p.data(), kTile, kGroup, kM, vcodes.data(), nb, pairs.data()); }),
        code_bytes + score_bytes);
    // Per call, value side.
    row("codebook columns (permute path)", "call",
        time([&] { codebook_columns(pq_v.centroids(), kM, dsub, cols.data()); }));
    row("clear + fold of the pair histograms", "call", time([&] {
            std::fill(pairs.begin(), pairs.end(), 0.0f);
            std::fill(hist.begin(), hist.end(), 0.0f);
            pair_hist_marginals(pairs.data(), kGroup, kM, hist.data());
        }));
    row("histogram x codebook", "call",
        time([&] { hist_times_codebook(hist.data(), kGroup, kM, 16, dsub, pq_v.centroids(), acc.data()); }));
    row("inverse transform", "call", time([&] { pq_v.inverse(acc.data(), out.data(), kGroup); }));

    // The whole call over the same tile, each score and value path: what the stages add up to.
    std::vector<PqValuePath> value_paths = {PqValuePath::permute, PqValuePath::pairs};
    if (bf16_values_here()) value_paths.push_back(PqValuePath::bf16);
    for (PqScorePath sp : {PqScorePath::f32, PqScorePath::int8})
        for (PqValuePath vp : value_paths) {
            PqAttentionOptions o;
            o.scores = sp;
            o.values = vp;
            AttentionPartial part(kGroup, kD);
            Workspace ws;
            const double s = time([&] {
                part.reset(kGroup, kD);
                attend_pq(q.data(), kGroup, pq_k, pq_v, kcodes.data(), vcodes.data(), kTile, 0.088f, o, part, &ws);
            });
            const std::string name = fmt::format("whole call, {} scores, {} values", sp == PqScorePath::int8 ? "int8" : "f32",
                                                 to_string(vp));
            row(name.c_str(), "tile", s, 2 * code_bytes);
        }

    // 8-bit codebooks (what bits= picks at long contexts), M = 16: the same bytes per token as 4-bit
    // M = 32, 256 centroids per subspace; values only by histogram.
    constexpr int kM8 = 16;
    const ProductQuantizer pk8 = bench_pq(kM8, 8, 3), pv8 = bench_pq(kM8, 8, 4);
    const std::size_t bb8 = code_block_bytes(kM8, 8);
    std::vector<std::uint8_t> kcodes8(nb * bb8), vcodes8(nb * bb8), qlut8(std::size_t(kGroup) * kM8 * 256);
    for (std::size_t i = 0; i < kcodes8.size(); ++i) {
        kcodes8[i] = std::uint8_t(i * 2654435761u >> 13);
        vcodes8[i] = std::uint8_t(i * 40503u >> 7);
    }
    std::vector<float> lut8(std::size_t(kGroup) * kM8 * 256), hist8(std::size_t(kM8) * 256 * kGroup);
    AlignedBuffer<float> lut4(lut8.size());
    const double code_bytes8 = double(bb8) / kCodeBlock;
    row("query transform + f32 tables", "call", time([&] {
            pk8.transform_query(q.data(), qy.data(), kGroup);
            k.build_lut(qy.data(), kGroup, kM8, 256, kD / kM8, pk8.centroids(), lut8.data(), lut_columns.data());
        }), 0, kM8, 8);
    row("tables interleaved by 4 heads", "call", time([&] { interleave_luts_by4(lut8.data(), kGroup, kM8, lut4.data()); }),
        0, kM8, 8);
    row("int8 tables", "call", time([&] { quantize_luts(lut8.data(), kGroup, kM8, 256, qlut8.data(), qprm.data()); }), 0,
        kM8, 8);
    row("scan, f32 tables by 4 heads", "tile",
        time([&] { k.scan_f32_8bit_by4(lut4.data(), kGroup, kM8, kcodes8.data(), nb, scores.data(), kTile); }),
        code_bytes8 + score_bytes, kM8, 8);
    row("scan, int8 tables", "tile",
        time([&] { k.scan_i8(qlut8.data(), qprm.data(), kGroup, kM8, 8, kcodes8.data(), nb, scores.data(), kTile); }),
        code_bytes8 + score_bytes, kM8, 8);
    row("values, histogram", "tile",
        time([&] { k.values_hist(p.data(), kTile, kGroup, kM8, 8, vcodes8.data(), nb, hist8.data()); }),
        code_bytes8 + score_bytes, kM8, 8);
    row("histogram x codebook", "call", time([&] {
            hist_times_codebook(hist8.data(), kGroup, kM8, 256, kD / kM8, pv8.centroids(), acc.data());
        }), 0, kM8, 8);
    for (PqScorePath sp : {PqScorePath::f32, PqScorePath::int8}) {
        PqAttentionOptions o;
        o.scores = sp;
        AttentionPartial part(kGroup, kD);
        Workspace ws;
        const double s = time([&] {
            part.reset(kGroup, kD);
            attend_pq(q.data(), kGroup, pk8, pv8, kcodes8.data(), vcodes8.data(), kTile, 0.088f, o, part, &ws);
        });
        row(sp == PqScorePath::int8 ? "whole call, int8 scores, histogram values" : "whole call, f32 scores, histogram values",
            "tile", s, 2 * code_bytes8, kM8, 8);
    }
    return rows;
}

}  // namespace aqpim::cli
