// Batched training of a layer's quantizers, and the bits= choice of m from calibration error.

#include "kv/pq_codebooks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "aqpim/error.h"
#include "aqpim/threads.h"
#include "kv/pq_layout.h"
#include "simd/prefetch.h"

namespace aqpim::kv {

std::size_t PqLayerVersion::parameter_bytes() const {
    std::size_t b = 0;
    for (const auto& [qs, stored] : {std::pair{&k, &kc}, std::pair{&v, &vc}})
        for (std::size_t i = 0; i < qs->size(); ++i) {
            const ProductQuantizer& q = (*qs)[i];
            b += q.parameter_bytes();  // centroids counted at 4 bytes
            if (compact()) b = b - std::size_t(q.ksub()) * q.D() * 4 + (*stored)[i].bytes();
            // A variance-balanced plan that the data made the identity is not stored, but counted:
            // the bytes do not depend on the values (the budget's prediction; eval's probe runs).
            if (q.has_identity_permutation() && !plan_is_identity_by_construction(q.params()))
                b += std::size_t(q.D()) * 4;
        }
    return b;
}

void PqLayerVersion::store_compact(CodebookStorage storage) {
    if (compact()) return;
    for (auto [qs, out] : {std::pair{&k, &kc}, std::pair{&v, &vc}}) {
        out->clear();
        for (ProductQuantizer& q : *qs) {
            out->push_back(CompactCentroids::round(storage, q.centroids(), q.M(), q.ksub(), q.dsub()));
            q.release_centroids();
        }
    }
}

void PqLayerVersion::adopt_compact(std::vector<CompactCentroids> k_centroids, std::vector<CompactCentroids> v_centroids) {
    AQPIM_ASSERT(k_centroids.size() == k.size() && v_centroids.size() == v.size());
    kc = std::move(k_centroids);
    vc = std::move(v_centroids);
    for (auto* qs : {&k, &v})
        for (ProductQuantizer& q : *qs) q.release_centroids();
}

void PqLayerVersion::keep_counted_only(CodebookStorage storage) {
    if (storage != CodebookStorage::f32) return store_compact(storage);
    for (auto* qs : {&k, &v})
        for (ProductQuantizer& q : *qs) q.release_centroid_norms();
}

const float* PqLayerVersion::widened_centroids(bool value, int ih, std::vector<float>& out) const {
    if (!compact()) return nullptr;
    (value ? vc : kc)[std::size_t(ih)].widen(out);
    return out.data();
}

void PqLayerVersion::prefetch(int ih) const {
    for (const bool value : {false, true}) {
        const ProductQuantizer& q = (value ? v : k)[std::size_t(ih)];
        const auto ahead = [](const auto& xs) { prefetch_l2(xs.data(), xs.size() * sizeof(xs[0])); };
        ahead(q.scale());
        ahead(q.permutation());
        if (!compact()) {
            prefetch_l2(q.centroids(), std::size_t(q.M()) * q.ksub() * q.dsub() * sizeof(float));
            continue;
        }
        const CompactCentroids& c = (value ? vc : kc)[std::size_t(ih)];
        ahead(c.f16);
        ahead(c.i8);
        ahead(c.scale);
    }
}

const ProductQuantizer& PqLayerVersion::quantizer(bool value, int ih, ProductQuantizer& scratch) const {
    const ProductQuantizer& q = (value ? v : k)[std::size_t(ih)];
    if (!compact()) return q;
    std::vector<float> wide;  // copied into the scratch quantizer by set_centroids
    (value ? vc : kc)[std::size_t(ih)].widen(wide);
    scratch = q;
    scratch.set_centroids(wide.data());
    return scratch;
}

namespace {

/// Train pqs[i] on xs[i] ([ns[i]][D]): one train_product_quantizers call per distinct (M, rows).
void train_batched(std::vector<ProductQuantizer>& pqs, const std::vector<const float*>& xs,
                   const std::vector<std::int64_t>& ns) {
    std::vector<bool> done(pqs.size(), false);
    for (std::size_t a = 0; a < pqs.size(); ++a) {
        if (done[a]) continue;
        std::vector<std::size_t> group;
        for (std::size_t b = a; b < pqs.size(); ++b)
            if (!done[b] && pqs[b].M() == pqs[a].M() && ns[b] == ns[a]) group.push_back(b), done[b] = true;
        std::vector<ProductQuantizer> batch;
        std::vector<const float*> bx;
        for (std::size_t i : group) batch.push_back(std::move(pqs[i])), bx.push_back(xs[i]);
        train_product_quantizers(batch, bx, ns[a]);
        for (std::size_t i = 0; i < group.size(); ++i) pqs[group[i]] = std::move(batch[i]);
    }
}

}  // namespace

PqLayerVersion train_pq_layer_version(const PqKvParams& p, const KvShape& shape, std::span<const int> Mk,
                                      std::span<const int> Mv, PqTrainSet xk, PqTrainSet xv) {
    const int n_kv_heads = shape.n_kv_head;
    AQPIM_ASSERT(int(xk.x.size()) == n_kv_heads && int(xv.x.size()) == n_kv_heads && int(Mk.size()) == n_kv_heads && int(Mv.size()) == n_kv_heads);
    std::vector<ProductQuantizer> all;
    std::vector<const float*> xs;
    std::vector<std::int64_t> ns;
    for (int ih = 0; ih < n_kv_heads; ++ih)
        all.emplace_back(pq_key_params(p, shape, Mk[ih])), xs.push_back(xk.x[ih]), ns.push_back(xk.n);
    for (int ih = 0; ih < n_kv_heads; ++ih)
        all.emplace_back(pq_value_params(p, shape, Mv[ih])), xs.push_back(xv.x[ih]), ns.push_back(xv.n);
    train_batched(all, xs, ns);
    PqLayerVersion v;
    v.k.assign(std::make_move_iterator(all.begin()), std::make_move_iterator(all.begin() + n_kv_heads));
    v.v.assign(std::make_move_iterator(all.begin() + n_kv_heads), std::make_move_iterator(all.end()));
    return v;
}

namespace {

/// sin and cos of an angle to float precision, without libm: reduced by the nearest multiple k of
/// pi/2 in double (absolute error below 1e-10 for |a| < 2^20), then Taylor polynomials in float on
/// [-pi/4, pi/4] (truncation below 2e-9), the quadrant from k. libm's double sincos per value was
/// 1.7% of a 960 + 64 serve load's CPU (rope_augment's share), this a fraction of it.
inline void sincos_float(double a, float& s, float& c) {
    const double k = std::nearbyint(a * (2.0 / M_PI));
    const float r = float(a - k * (M_PI / 2.0)), r2 = r * r;
    const float sr = r + r * r2 * (-1.0f / 6 + r2 * (1.0f / 120 + r2 * (-1.0f / 5040 + r2 * (1.0f / 362880))));
    const float cr = 1.0f + r2 * (-0.5f + r2 * (1.0f / 24 + r2 * (-1.0f / 720 + r2 * (1.0f / 40320 - r2 * (1.0f / 3628800)))));
    switch (std::int64_t(k) & 3) {
        case 0: s = sr, c = cr; break;
        case 1: s = cr, c = -sr; break;
        case 2: s = -sr, c = -cr; break;
        default: s = -cr, c = sr; break;
    }
}

}  // namespace

void rope_augment(const float* x, std::int64_t n, int D, RopePairs pairs, std::span<const float> inv_freq,
                  int copies, double span, std::uint64_t seed, std::vector<float>& out) {
    AQPIM_ASSERT(pairs != RopePairs::none && int(inv_freq.size()) == D / 2);
    out.resize(std::size_t(1 + copies) * std::size_t(n) * D);
    std::copy(x, x + n * D, out.begin());
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> shift(0.0, span);
    const int half = D / 2;
    for (int c = 1; c <= copies; ++c)
        for (std::int64_t t = 0; t < n; ++t) {
            const double delta = shift(rng);
            const float* src = x + t * D;
            float* dst = out.data() + (std::size_t(c) * n + t) * D;
            for (int i = 0; i < half; ++i) {
                const int a = pairs == RopePairs::neox ? i : 2 * i, b = pairs == RopePairs::neox ? i + half : 2 * i + 1;
                float sn, cs;
                sincos_float(delta * double(inv_freq[i]), sn, cs);
                dst[a] = src[a] * cs - src[b] * sn;
                dst[b] = src[a] * sn + src[b] * cs;
            }
        }
}

double pq_relative_error(std::span<const ProductQuantizer> pqs, std::span<const float* const> xs, std::int64_t n) {
    double err = 0, energy = 0;
    std::vector<std::uint8_t> codes;
    std::vector<float> y;
    for (std::size_t i = 0; i < pqs.size(); ++i) {
        const ProductQuantizer& q = pqs[i];
        const int D = q.D();
        codes.resize(std::size_t(n) * q.M());
        y.resize(std::size_t(n) * D);
        q.encode(xs[i], n, codes.data());
        q.decode(codes.data(), n, y.data());
        // Each row in 16 float lanes (independent sums the compiler vectorizes), rows summed in double.
        for (std::int64_t t = 0; t < n; ++t) {
            const float* x = xs[i] + t * D;
            const float* r = y.data() + t * D;
            float e[16] = {}, x2[16] = {};
            int j = 0;
            for (; j + 16 <= D; j += 16)
                for (int l = 0; l < 16; ++l) {
                    const float d = x[j + l] - r[j + l];
                    e[l] += d * d;
                    x2[l] += x[j + l] * x[j + l];
                }
            for (; j < D; ++j) {
                const float d = x[j] - r[j];
                e[0] += d * d;
                x2[0] += x[j] * x[j];
            }
            for (int l = 0; l < 16; ++l) err += e[l], energy += x2[l];
        }
    }
    return energy > 0 ? err / energy : 0.0;
}

namespace {

/// The bits= choice of m trains every candidate with at most this many k-means iterations and
/// plain k-means++ seeds (trials = 1), on the even un-augmented rows (docs/kv-pq.md: on the tuning
/// half, 2-25 iterations, 1 or 2 + ln k trials, all rows or every other one gave mean KL within 1%
/// of training every candidate fully).
constexpr int kChoiceIters = 3;
constexpr int kChoiceTrials = 1;
/// A candidate is scored on the rows it trained on when they are at least this many per centroid,
/// else on the odd rows it did not see: an 8-bit codebook (256 centroids) fits the ~255 rows of a
/// version exactly whatever m, and scored in-sample every candidate had error 0 (docs/kv-pq.md).
/// In-sample above it: held-out scoring there was no better on the tuning half (mean KL -0.4% to
/// +7% over bits 1-3.5 at 1024 tokens).
constexpr std::int64_t kInSampleRowsPerCentroid = 2;

/// One stream of a layer (a KV head's keys or values) in the bits= choice.
struct Stream {
    bool value = false;
    int ih = 0;
    std::vector<int> ms;      ///< candidates that fit, ascending
    std::vector<double> err;  ///< [candidate] relative error of the candidate's proxy training
    std::size_t at = 0;       ///< chosen candidate
};

/// Every stream's err: each candidate m trained (one batched call per m) with the k-means options
/// of `p` on the rows of xk / xv, its relative error measured on the rows of ek / ev.
void measure_candidates(const PqKvParams& p, const KvShape& shape, std::vector<Stream>& streams, PqTrainSet xk,
                        PqTrainSet xv, PqTrainSet ek, PqTrainSet ev) {
    std::vector<int> all_m;
    for (const Stream& st : streams) all_m.insert(all_m.end(), st.ms.begin(), st.ms.end());
    std::sort(all_m.begin(), all_m.end());
    all_m.erase(std::unique(all_m.begin(), all_m.end()), all_m.end());
    for (Stream& st : streams) st.err.assign(st.ms.size(), 0.0);
    for (int M : all_m) {
        std::vector<ProductQuantizer> pqs;
        std::vector<const float*> xs, es;
        std::vector<std::int64_t> ns;
        std::vector<std::pair<Stream*, std::size_t>> owner;  // (stream, candidate)
        for (Stream& st : streams) {
            const auto at = std::find(st.ms.begin(), st.ms.end(), M);
            if (at == st.ms.end()) continue;
            pqs.emplace_back(st.value ? pq_value_params(p, shape, M) : pq_key_params(p, shape, M));
            xs.push_back(st.value ? xv.x[st.ih] : xk.x[st.ih]);
            es.push_back(st.value ? ev.x[st.ih] : ek.x[st.ih]);
            ns.push_back(st.value ? xv.n : xk.n);
            owner.emplace_back(&st, std::size_t(at - st.ms.begin()));
        }
        train_batched(pqs, xs, ns);
        parallel_for(std::int64_t(pqs.size()), [&](std::int64_t i) {  // each candidate's own error
            owner[i].first->err[owner[i].second] =
                pq_relative_error({&pqs[i], 1}, {&es[i], 1}, owner[i].first->value ? ev.n : ek.n);
        });
    }
}

/// Greedy: every stream starts at its smallest m; while an upgrade fits `room` more bytes, take the
/// one with the most weighted error reduction per byte. Returns the bytes the upgrades add.
std::size_t allocate(std::vector<Stream>& streams, std::size_t room, double v_weight, int nbits) {
    const auto bytes_of = [&](int M) { return pq_token_code_bytes(M, nbits); };
    std::size_t used = 0;
    for (;;) {
        Stream* best = nullptr;
        std::size_t best_to = 0;
        double best_gain = 0;
        for (Stream& st : streams) {
            const double w = st.value ? v_weight : 1.0;
            for (std::size_t to = st.at + 1; to < st.ms.size(); ++to) {
                const std::size_t extra = bytes_of(st.ms[to]) - bytes_of(st.ms[st.at]);
                if (used + extra > room) continue;
                const double gain = w * (st.err[st.at] - st.err[to]) / double(std::max<std::size_t>(extra, 1));
                if (gain > best_gain) best_gain = gain, best = &st, best_to = to;
            }
        }
        if (best == nullptr) return used;
        used += bytes_of(best->ms[best_to]) - bytes_of(best->ms[best->at]);
        best->at = best_to;
    }
}

}  // namespace

PqLayerChoice choose_pq_layer(const PqKvParams& p, const KvShape& shape, std::size_t share, PqTrainSet xk,
                              PqTrainSet xv) {
    const int n_kv_heads = shape.n_kv_head;
    const std::vector<int> ck = pq_m_candidates(p, shape, true), cv = pq_m_candidates(p, shape, false);
    const auto bytes_of = [&](int M) { return pq_token_code_bytes(M, p.nbits); };
    const std::size_t floor_bytes = std::size_t(n_kv_heads) * (bytes_of(ck.front()) + bytes_of(cv.front()));
    AQPIM_ASSERT(floor_bytes <= share);
    const std::size_t room = share - floor_bytes;  // what upgrades may add

    // Streams: keys of head 0..n_kv_heads-1, then values, each with the candidates that fit alone.
    std::vector<Stream> streams;
    for (const bool value : {false, true})
        for (int ih = 0; ih < n_kv_heads; ++ih) {
            Stream st{value, ih, {}, {}, 0};
            const std::vector<int>& c = value ? cv : ck;
            for (int M : c)
                if (bytes_of(M) - bytes_of(c.front()) <= room) st.ms.push_back(M);
            streams.push_back(std::move(st));
        }
    // The choice from proxies: every candidate trained briefly on the even rows of the version's
    // own rows (the first xv.n rows of xk: rope_augment puts the rotated copies after them) and
    // scored on those rows, or on the odd ones when the even ones are too few for the centroids;
    // then only the chosen m are trained in full, on every row. (One row: scored on itself.)
    PqKvParams proxy = p;
    proxy.iters = std::min(p.iters, kChoiceIters);
    proxy.trials = kChoiceTrials;
    const int D = shape.head_dim;
    const std::int64_t n_even = (xv.n + 1) / 2, n_odd = xv.n / 2;
    const bool held_out = n_odd > 0 && n_even < kInSampleRowsPerCentroid * (std::int64_t(1) << p.nbits);
    std::vector<std::vector<float>> proxy_rows(4 * std::size_t(n_kv_heads));  // [parity][keys of heads 0.., values][rows][D]
    std::vector<const float*> pk(n_kv_heads), pv(n_kv_heads), ek(n_kv_heads), ev(n_kv_heads);
    for (int ih = 0; ih < n_kv_heads; ++ih)
        for (const bool value : {false, true})
            for (const int parity : {0, 1}) {
                if (parity == 1 && !held_out) continue;  // scored in-sample: no odd rows
                const std::int64_t n_rows = parity == 0 ? n_even : n_odd;
                std::vector<float>& r = proxy_rows[std::size_t(parity * 2 * n_kv_heads + (value ? n_kv_heads + ih : ih))];
                const float* x = value ? xv.x[ih] : xk.x[ih];
                r.resize(std::size_t(n_rows) * D);
                for (std::int64_t i = 0; i < n_rows; ++i) std::copy_n(x + (2 * i + parity) * D, D, r.data() + i * D);
                (parity == 0 ? (value ? pv : pk) : (value ? ev : ek))[ih] = r.data();
            }
    measure_candidates(proxy, shape, streams, PqTrainSet{pk, n_even}, PqTrainSet{pv, n_even},
                       held_out ? PqTrainSet{ek, n_odd} : PqTrainSet{pk, n_even},
                       held_out ? PqTrainSet{ev, n_odd} : PqTrainSet{pv, n_even});
    const std::size_t used = allocate(streams, room, p.v_weight, p.nbits);
    PqLayerChoice c;
    c.bytes = floor_bytes + used;
    c.Mk.resize(n_kv_heads);
    c.Mv.resize(n_kv_heads);
    c.err_k.resize(n_kv_heads);
    c.err_v.resize(n_kv_heads);
    for (const Stream& st : streams) {
        (st.value ? c.Mv : c.Mk)[st.ih] = st.ms[st.at];
        (st.value ? c.err_v : c.err_k)[st.ih] = st.err[st.at];
    }
    c.version = train_pq_layer_version(p, shape, c.Mk, c.Mv, xk, xv);
    return c;
}

}  // namespace aqpim::kv
