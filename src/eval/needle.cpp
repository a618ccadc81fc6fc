// Planted needles on synthetic K/V at long contexts: one key far back, queried by its own direction;
// the scheme's weight on it read from two runs that differ only in the needle's value
// (aqpim/retrieval.h, docs/eval.md).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "aqpim/error.h"
#include "aqpim/kv_capture.h"
#include "aqpim/retrieval.h"

namespace aqpim {
namespace {

constexpr double kRopeTheta = 10000.0;  // synthetic_attention's RoPE
constexpr std::int64_t kAppendChunk = 4096;

/// k_p . k_t - k_p . k_p for t < n: the needle query's score gaps per unit of beta.
std::vector<double> score_gaps(const std::vector<float>& K, int hd, std::int64_t n, std::int64_t p) {
    const float* kp = K.data() + std::size_t(p) * hd;
    std::vector<double> gaps(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) {
        double dot = 0.0;
        const float* kt = K.data() + std::size_t(t) * hd;
        for (int d = 0; d < hd; ++d) dot += double(kp[d]) * kt[d];
        gaps[std::size_t(t)] = dot;
    }
    const double self = gaps[std::size_t(p)];
    for (double& g : gaps) g -= self;
    return gaps;
}

/// Exact weight on the needle of the query beta * k_p (scores scaled by `scale`), in double.
double needle_weight(const std::vector<double>& gaps, double scale, double beta) {
    double sum = 0.0;
    for (double g : gaps) sum += std::exp(scale * beta * g);
    return 1.0 / sum;
}

/// The weight rises to 1 with beta when every other key's gap is negative.
bool retrievable(const std::vector<double>& gaps, std::int64_t p) {
    double most = -std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < gaps.size(); ++t)
        if (std::int64_t(t) != p) most = std::max(most, gaps[t]);
    return most < 0.0;
}

/// beta with exact weight `target` on the needle (monotone in beta when retrievable).
double beta_for(const std::vector<double>& gaps, double scale, double target) {
    double lo = 0.0, hi = 1.0;
    while (needle_weight(gaps, scale, hi) < target && hi < 1e12) hi *= 2;
    for (int it = 0; it < 60; ++it) {
        const double mid = 0.5 * (lo + hi);
        (needle_weight(gaps, scale, mid) < target ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

}  // namespace

std::vector<SchemeNeedles> plant_needles(const std::vector<KvSchemeSpec>& schemes, const NeedleOptions& options,
                                         const std::function<void(const std::string&)>& progress) {
    AQPIM_CHECK(!schemes.empty(), "needles: no KV cache scheme");
    AQPIM_CHECK(!options.contexts.empty() && !options.depths.empty() && !options.target_weights.empty(),
                "needles: contexts, depths and target weights must be non-empty");
    const int hd = options.head_dim;
    AQPIM_CHECK(options.decoy_every >= 2, "needles: decoy spacing {} (need >= 2)", options.decoy_every);
    AQPIM_CHECK(hd >= 4 && hd % 2 == 0 && hd <= 1024, "needles: head_dim {} (need an even value in [4, 1024])", hd);
    std::int64_t max_ctx = 0;
    for (std::int64_t c : options.contexts) {
        AQPIM_CHECK(c >= 16 && c <= (1 << 20), "needles: context {} (need {}..{})", c,
                    16, 1 << 20);
        max_ctx = std::max(max_ctx, c);
    }
    for (double d : options.depths) AQPIM_CHECK(d >= 0 && d <= 1, "needles: depth {} (need 0..1)", d);
    for (double w : options.target_weights)
        AQPIM_CHECK(w > 0.5 && w < 1, "needles: target weight {} (need 0.5 < w < 1)", w);

    // Keys with real keys' statistics (outlier channels, low rank, RoPE by position).
    const CapturedAttention syn = synthetic_attention(int(max_ctx), 1, 1, hd, options.seed);
    const std::vector<float>& K = syn.k;
    KvShape shape;
    shape.n_layer = 1;
    shape.n_kv_head = 1;
    shape.head_dim = hd;
    shape.rope_pairs = RopePairs::neox;
    for (int i = 0; i < hd / 2; ++i) shape.rope_inv_freq.push_back(float(std::pow(kRopeTheta, -2.0 * i / hd)));
    for (const KvSchemeSpec& spec : schemes) make_kv_cache(spec, shape, KvCacheOptions{0, max_ctx});

    // Value patterns: A = ones on the first half of the dims, B = ones on the second half.
    const auto pattern = [hd](bool b, float* v) {
        for (int d = 0; d < hd; ++d) v[d] = (d >= hd / 2) == b ? 1.0f : 0.0f;
    };
    const double scale = 1.0 / std::sqrt(double(hd));

    std::vector<SchemeNeedles> out;
    for (const KvSchemeSpec& spec : schemes) {
        SchemeNeedles sn;
        sn.spec = spec.text;
        for (std::int64_t n : options.contexts) {
            if (progress) progress(fmt::format("needles: {} at {} tokens", spec.text, n));
            for (double depth : options.depths) {
                std::int64_t p = std::clamp<std::int64_t>(std::llround(depth * double(n - 1)), 2, n - 2);
                std::vector<double> gaps = score_gaps(K, hd, n, p);
                while (p < n - 2 && !retrievable(gaps, p)) gaps = score_gaps(K, hd, n, ++p);
                if (!retrievable(gaps, p)) continue;
                std::vector<double> betas;
                for (double w : options.target_weights) betas.push_back(beta_for(gaps, scale, w));
                // Queries: beta * k_p, one row per target, all at the last position.
                const int n_rows = int(betas.size());
                std::vector<float> q(std::size_t(n_rows) * hd);
                std::vector<std::int64_t> pos(std::size_t(n_rows), n - 1);
                for (int r = 0; r < n_rows; ++r)
                    for (int d = 0; d < hd; ++d) q[std::size_t(r) * hd + d] = float(betas[std::size_t(r)] * K[std::size_t(p) * hd + d]);
                std::vector<std::vector<float>> outs;
                std::vector<std::pair<std::string, std::uint64_t>> first_parts;
                std::unique_ptr<KvCache> first;  // the second run makes the choices the first made from its data
                for (const bool needle_b : {true, false}) {
                    std::unique_ptr<KvCache> cache = first ? make_kv_cache_like(spec, shape, KvCacheOptions{0, n}, *first, 0)
                                                           : make_kv_cache(spec, shape, KvCacheOptions{0, n});
                    cache->add_sequence(0);
                    sn.scheme = cache->scheme();
                    std::vector<float> v;
                    for (std::int64_t t0 = 0; t0 < n; t0 += kAppendChunk) {
                        const std::int64_t m = std::min(kAppendChunk, n - t0);
                        v.assign(std::size_t(m) * hd, 0.0f);
                        for (std::int64_t i = 0; i < m; ++i) {
                            const std::int64_t t = t0 + i;
                            const bool b = t == p ? needle_b : t % options.decoy_every == 1;
                            pattern(b, v.data() + std::size_t(i) * hd);
                        }
                        cache->append(0, 0, m, K.data() + std::size_t(t0) * hd, v.data());
                    }
                    std::vector<float> o(std::size_t(n_rows) * hd);
                    KvQuery query;
                    query.q = q.data();
                    query.q_stride = hd;
                    query.n_rows = n_rows;
                    query.group = 1;
                    query.pos = pos.data();
                    query.scale = float(scale);
                    query.out = o.data();
                    query.out_stride = hd;
                    cache->attend(0, 0, 0, query);
                    outs.push_back(std::move(o));
                    const KvMemory mem = cache->memory();
                    if (needle_b) {
                        first_parts = mem.parts;
                        if (n == max_ctx) sn.bits_per_element = mem.bits_per_element(shape);
                    } else if (mem.parts != first_parts && sn.note.empty()) {
                        sn.note = "the two runs held other bytes (the key storage depends on the values):";
                        for (std::size_t i = 0; i < mem.parts.size() && i < first_parts.size(); ++i)
                            if (mem.parts[i] != first_parts[i])
                                sn.note += fmt::format(" {} {} vs {}", mem.parts[i].first, first_parts[i].second,
                                                       mem.parts[i].second);
                    }
                    if (!first) first = std::move(cache);
                }
                for (int r = 0; r < n_rows; ++r) {
                    NeedleResult x;
                    x.context = n;
                    x.needle_pos = p;
                    x.depth = depth;
                    x.target = options.target_weights[std::size_t(r)];
                    x.exact_weight = needle_weight(gaps, scale, betas[std::size_t(r)]);
                    double w = 0.0;  // projection of out_B - out_A on B - A, |B - A|^2 = hd
                    for (int d = 0; d < hd; ++d) {
                        const double diff = double(outs[0][std::size_t(r) * hd + d]) - outs[1][std::size_t(r) * hd + d];
                        w += d >= hd / 2 ? diff : -diff;
                    }
                    x.scheme_weight = w / hd;
                    x.kept = std::abs(x.scheme_weight - x.exact_weight) <= 0.1 * x.exact_weight && x.scheme_weight > 0.5;
                    sn.results.push_back(x);
                }
            }
        }
        out.push_back(std::move(sn));
    }
    return out;
}

}  // namespace aqpim
