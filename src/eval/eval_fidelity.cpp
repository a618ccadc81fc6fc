// Attention fidelity of one layer's KV head: a recording decorator around any cache, exact attention
// over the recorded inputs, and probe runs that read the scheme's attention weights (aqpim/eval.h).

#include <algorithm>
#include <cmath>
#include <limits>

#include "aqpim/error.h"
#include "aqpim/eval.h"
#include "aqpim/perplexity.h"
#include "core/int_math.h"

namespace aqpim {

// ---- RecordingKvCache ------------------------------------------------------------------------------

RecordingKvCache::RecordingKvCache(std::unique_ptr<KvCache> inner, int il, int ih, ValueProbe probe)
    : KvCache(inner->shape()), inner_(std::move(inner)), il_(il), ih_(ih), probe_(std::move(probe)) {
    AQPIM_CHECK(il >= 0 && il < shape().n_layer, "--layer {}: the model has layers 0..{}", il, shape().n_layer - 1);
    AQPIM_CHECK(ih >= 0 && ih < shape().n_kv_head, "--head {}: the model has KV heads 0..{}", ih,
                shape().n_kv_head - 1);
}

const RecordingKvCache::Recorded& RecordingKvCache::recorded(int seq_id) const {
    for (const auto& [id, r] : seqs_)
        if (id == seq_id) return r;
    AQPIM_FAIL("recording kv cache: nothing recorded for sequence {}", seq_id);
}

void RecordingKvCache::append(int il, int seq_id, std::int64_t n, const float* k, const float* v) {
    if (il != il_ || n <= 0) return inner_->append(il, seq_id, n, k, v);
    const int hd = shape().head_dim, n_kv_heads = shape().n_kv_head;
    const std::int64_t pos0 = inner_->n_tokens(seq_id, il);
    auto it = std::find_if(seqs_.begin(), seqs_.end(), [&](const auto& e) { return e.first == seq_id; });
    if (it == seqs_.end()) it = seqs_.insert(seqs_.end(), {seq_id, Recorded{}});
    Recorded& rec = it->second;
    AQPIM_ASSERT(std::int64_t(rec.k.size()) == pos0 * hd);
    for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t off = (t * n_kv_heads + ih_) * hd;
        rec.k.insert(rec.k.end(), k + off, k + off + hd);
        rec.v.insert(rec.v.end(), v + off, v + off + hd);
    }
    if (!probe_) return inner_->append(il, seq_id, n, k, v);
    scratch_.assign(v, v + n * n_kv_heads * hd);
    for (std::int64_t t = 0; t < n; ++t) probe_(pos0 + t, scratch_.data() + (t * n_kv_heads + ih_) * hd);
    inner_->append(il, seq_id, n, k, scratch_.data());
}

void RecordingKvCache::attend(int il, int seq_id, int ih, const KvQuery& query) const {
    inner_->attend(il, seq_id, ih, query);
    if (il != il_ || ih != ih_) return;
    const int hd = shape().head_dim, width = query.group * hd;
    std::lock_guard<std::mutex> lock(rows_mutex_);
    for (int r = 0; r < query.n_rows; ++r) {
        Row row;
        row.seq_id = seq_id;
        row.pos = query.pos[r];
        row.scale = query.scale;
        // Heads of the group are consecutive head_dim slices of a row.
        row.q.assign(query.q + r * query.q_stride, query.q + r * query.q_stride + width);
        row.out.assign(query.out + r * query.out_stride, query.out + r * query.out_stride + width);
        rows_.push_back(std::move(row));
    }
}

// ---- measure_fidelity ----------------------------------------------------------------------------

namespace {

using Row = RecordingKvCache::Row;

/// Exact attention of one query head over tokens [0, pos] in double: weights a [pos + 1], output o.
void exact_attention(const float* q, const std::vector<float>& K, const std::vector<float>& V, std::int64_t pos,
                     int hd, float scale, std::vector<double>& s, std::vector<double>& a, std::vector<double>& o) {
    const std::size_t n = std::size_t(pos + 1);
    s.resize(n);
    a.resize(n);
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < n; ++t) {
        double dot = 0.0;
        for (int d = 0; d < hd; ++d) dot += double(q[d]) * K[t * hd + d];
        s[t] = double(scale) * dot;
        mx = std::max(mx, s[t]);
    }
    double sum = 0.0;
    for (std::size_t t = 0; t < n; ++t) sum += (a[t] = std::exp(s[t] - mx));
    o.assign(std::size_t(hd), 0.0);
    for (std::size_t t = 0; t < n; ++t) {
        a[t] /= sum;
        for (int d = 0; d < hd; ++d) o[d] += a[t] * V[t * hd + d];
    }
}

/// Sums of one bin before the divisions.
struct BinSums {
    std::int64_t n = 0, n_probed = 0;
    double out_err = 0, out_err_max = 0, score_num = 0, score_den = 0, kl = 0;

    void add_output(double err) {
        ++n;
        out_err += err;
        out_err_max = std::max(out_err_max, err);
    }
    FidelityBin finish(std::int64_t begin, std::int64_t end, bool probed) const {
        FidelityBin b;
        b.pos_begin = begin;
        b.pos_end = end;
        b.n_rows = n;
        b.out_rel_err = n ? out_err / double(n) : 0.0;
        b.out_rel_err_max = out_err_max;
        const double nan = std::numeric_limits<double>::quiet_NaN();
        b.score_rel_rmse = probed && score_den > 0 ? std::sqrt(score_num / score_den) : nan;
        b.attn_kl = probed && n_probed ? kl / double(n_probed) : nan;
        return b;
    }
};

/// Weights below this count as this much in logs: a probed weight is a difference of two float
/// outputs of order 1, so its absolute precision is about 1e-7 (and such weights carry no attention).
constexpr double kMinWeight = 1e-6;
/// How far a probed row's weights may be from a distribution (probe values stored inexactly).
constexpr double kProbeSumTolerance = 1e-2;

}  // namespace

FidelityReport measure_fidelity(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                                const std::vector<KvSchemeSpec>& schemes, const FidelityOptions& options) {
    AQPIM_CHECK(!schemes.empty(), "eval --fidelity: no KV cache scheme to measure");
    AQPIM_CHECK(options.n_bins >= 1, "eval --fidelity: {} position bins (need >= 1)", options.n_bins);
    const PerplexityChunks chunks(tokens, bos, options.n_ctx, 1);
    const std::vector<std::int32_t> chunk = chunks.chunk(0);
    const KvShape shape = model.kv_shape();
    const ModelConfig& c = model.config();
    const int hd = shape.head_dim, group = c.n_head / c.n_kv_head, n_ctx = chunks.n_ctx();
    AQPIM_CHECK(options.n_bins <= n_ctx, "eval --fidelity: {} position bins for the {} positions of a chunk (at most one "
                "bin a position)", options.n_bins, n_ctx);
    const int block = options.probe_block > 0 ? options.probe_block : std::min(hd, 16);
    AQPIM_CHECK(block <= hd, "eval --fidelity: probe block of {} tokens exceeds head_dim {}", block, hd);
    const int n_blocks = ceil_div(n_ctx, block);
    AQPIM_CHECK(options.layer >= 0 && options.layer < shape.n_layer, "--layer {}: the model has layers 0..{}",
                options.layer, shape.n_layer - 1);
    AQPIM_CHECK(options.head >= 0 && options.head < shape.n_kv_head, "--head {}: the model has KV heads 0..{}",
                options.head, shape.n_kv_head - 1);
    check_kv_schemes(schemes, shape, KvCacheOptions{0, n_ctx});

    FidelityReport report;
    report.layer = options.layer;
    report.head = options.head;
    report.group = group;
    report.head_dim = hd;
    report.n_ctx = n_ctx;
    report.n_probe_runs = options.probe ? n_blocks + 1 : 0;
    report.probe_block = options.probe ? block : 0;

    const auto bin_of = [&](std::int64_t pos) { return int(pos * options.n_bins / n_ctx); };
    std::vector<float> logits;
    std::vector<double> s, a, o, w;
    for (const KvSchemeSpec& spec : schemes) {
        const KvCacheOptions cache_options{0, n_ctx};
        RecordingKvCache main(make_kv_cache(spec, shape, cache_options), options.layer, options.head);
        run_chunk(model, main, chunk, chunks.first_scored(), ScoredRows::batched, logits);
        const std::vector<Row>& rows = main.rows();
        const std::vector<float>& K = main.keys(0);
        const std::vector<float>& V = main.values(0);

        SchemeFidelity f;
        f.spec = spec.text;
        f.scheme = main.scheme();

        // The scheme's attention weights, read by probe runs (docs/eval.md). With P = block, the baseline
        // run passes for token t the value with ones at the dims d = t (mod P); run j the same with the
        // tokens of block j (positions [j P, (j + 1) P)) zeroed. Output coordinate d < P of a row is the
        // summed weight of the tokens t = d (mod P), and drops in run j by exactly the weight of token
        // j P + d. Every run holds the same P value patterns from its first P tokens on, so a scheme
        // that learns its value storage from the data represents them exactly too.
        std::vector<std::vector<float>> weights;  // [row][group][pos + 1]
        f.probe_ok = options.probe;
        if (options.probe) {
            const auto probe_run = [&](int zeroed_block) {
                auto probe = std::make_unique<RecordingKvCache>(
                    make_kv_cache_like(spec, shape, cache_options, main.inner(), 0), options.layer, options.head,
                    [&, zeroed_block](std::int64_t pos, float* v) {
                        std::fill(v, v + hd, 0.0f);
                        if (pos / block != zeroed_block)
                            for (std::int64_t d = pos % block; d < hd; d += block) v[d] = 1.0f;
                    });
                run_chunk(model, *probe, chunk, chunks.first_scored(), ScoredRows::batched, logits);
                return probe;
            };
            // Layer il's queries and keys depend only on the layers before it: a probe run must see the
            // main run's exactly and store the same bytes, or the scheme's storage depends on the values.
            const auto same_inputs = [&](const RecordingKvCache& probe) {
                if (probe.keys(0) != K || probe.rows().size() != rows.size())
                    return f.probe_note = "a probe run saw other keys than the main run", false;
                for (std::size_t r = 0; r < rows.size(); ++r)
                    if (probe.rows()[r].pos != rows[r].pos || probe.rows()[r].q != rows[r].q)
                        return f.probe_note = "a probe run saw other queries than the main run", false;
                const auto probe_parts = probe.memory().parts, main_parts = main.memory().parts;
                if (probe_parts != main_parts) {
                    f.probe_note = "a probe run held other bytes than the main run:";
                    for (std::size_t i = 0; i < probe_parts.size() && i < main_parts.size(); ++i)
                        if (probe_parts[i] != main_parts[i])
                            f.probe_note += fmt::format(" {} {} vs {}", main_parts[i].first, main_parts[i].second,
                                                        probe_parts[i].second);
                    return false;
                }
                return true;
            };
            const std::unique_ptr<RecordingKvCache> base = probe_run(-1);
            f.probe_ok = same_inputs(*base);
            // The baseline's output coordinates sum to the total weight: 1 when the values were stored exactly.
            for (std::size_t r = 0; r < rows.size() && f.probe_ok; ++r)
                for (int g = 0; g < group && f.probe_ok; ++g) {
                    const float* o = base->rows()[r].out.data() + std::size_t(g) * hd;
                    double sum = 0.0, lo = 0.0;
                    for (int d = 0; d < block; ++d) sum += o[d], lo = std::min(lo, double(o[d]));
                    if (std::abs(sum - 1.0) > kProbeSumTolerance || lo < -kProbeSumTolerance) {
                        f.probe_ok = false;
                        f.probe_note = fmt::format(
                            "the scheme does not store one-hot values exactly (at position {} the weights sum to {:.4f}, "
                            "least {:.4f})",
                            rows[r].pos, sum, lo);
                    }
                }
            if (f.probe_ok) {
                weights.resize(rows.size());
                for (std::size_t r = 0; r < rows.size(); ++r)
                    weights[r].assign(std::size_t(group) * std::size_t(rows[r].pos + 1), 0.0f);
            }
            for (int j = 0; j < n_blocks && f.probe_ok; ++j) {
                const std::unique_ptr<RecordingKvCache> run = probe_run(j);
                if (!(f.probe_ok = same_inputs(*run))) break;
                const std::int64_t t0 = std::int64_t(j) * block;
                for (std::size_t r = 0; r < rows.size(); ++r) {
                    const std::int64_t n = std::min<std::int64_t>(block, rows[r].pos + 1 - t0);
                    for (int g = 0; g < group; ++g)
                        for (std::int64_t d = 0; d < n; ++d) {
                            const std::size_t o = std::size_t(g) * hd + std::size_t(d);
                            weights[r][std::size_t(g) * std::size_t(rows[r].pos + 1) + std::size_t(t0 + d)] =
                                base->rows()[r].out[o] - run->rows()[r].out[o];
                        }
                }
            }
            if (!f.probe_ok) weights.clear();
        } else {
            f.probe_note = "not run (--no-probe)";
        }

        std::vector<BinSums> bins(std::size_t(options.n_bins));
        BinSums all;
        if (!weights.empty()) f.retrieval.emplace(std::max<std::int64_t>(1, n_ctx - 1));
        for (std::size_t r = 0; r < rows.size(); ++r) {
            const Row& row = rows[r];
            AQPIM_ASSERT(row.seq_id == 0 && row.pos < n_ctx);
            for (int g = 0; g < group; ++g) {
                exact_attention(row.q.data() + std::size_t(g) * hd, K, V, row.pos, hd, row.scale, s, a, o);
                double num = 0.0, den = 0.0;
                for (int d = 0; d < hd; ++d) {
                    const double e = double(row.out[std::size_t(g) * hd + d]) - o[d];
                    num += e * e;
                    den += o[d] * o[d];
                }
                const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
                BinSums& b = bins[std::size_t(bin_of(row.pos))];
                b.add_output(err);
                all.add_output(err);
                if (weights.empty()) continue;
                const float* wp = weights[r].data() + std::size_t(g) * (row.pos + 1);
                const std::size_t n = std::size_t(row.pos + 1);
                // The probed weights as a distribution (scalar schemes store the one-hot 1 as 1 +- 1e-3).
                double w_sum = 0.0;
                for (std::size_t t = 0; t < n; ++t) w_sum += wp[t];
                w.resize(n);
                for (std::size_t t = 0; t < n; ++t) w[t] = wp[t] / w_sum;
                f.retrieval->add(a.data(), w.data(), row.pos);
                // Score error from log-weight differences (log a'_t - log a_t = s'_t - s_t + a row constant),
                // weighted by the exact weights: tokens without weight, whose probed weights are below
                // the probe's precision, do not dominate.
                double mean_d = 0.0, mean_s = 0.0, kl = 0.0;
                for (std::size_t t = 0; t < n; ++t) {
                    const double la = std::log(std::max(a[t], kMinWeight));
                    const double lw = std::log(std::max(w[t], kMinWeight));
                    mean_d += a[t] * (lw - la);
                    mean_s += a[t] * s[t];
                    kl += a[t] * (la - lw);
                }
                double sn = 0.0, sd = 0.0;
                for (std::size_t t = 0; t < n; ++t) {
                    const double dd = std::log(std::max(w[t], kMinWeight)) -
                                      std::log(std::max(a[t], kMinWeight)) - mean_d;
                    sn += a[t] * dd * dd;
                    sd += a[t] * (s[t] - mean_s) * (s[t] - mean_s);
                }
                for (BinSums* bs : {&b, &all}) {
                    bs->score_num += sn;
                    bs->score_den += sd;
                    bs->kl += kl;
                    ++bs->n_probed;
                }
            }
        }
        const bool probed = !weights.empty();
        f.all = all.finish(0, n_ctx, probed);
        for (int ib = 0; ib < options.n_bins; ++ib) {
            const std::int64_t b0 = (std::int64_t(ib) * n_ctx + options.n_bins - 1) / options.n_bins;
            const std::int64_t b1 = (std::int64_t(ib + 1) * n_ctx + options.n_bins - 1) / options.n_bins;
            f.bins.push_back(bins[std::size_t(ib)].finish(b0, b1, probed));
        }
        report.schemes.push_back(std::move(f));
    }
    return report;
}

}  // namespace aqpim
