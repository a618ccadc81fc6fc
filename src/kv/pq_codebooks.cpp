// Batched training of a layer's quantizers, and the bits= choice of m from calibration error.

#include "kv/pq_codebooks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <cstdio>
#include <cstdlib>

#include "aqpim/error.h"
#include "kv/pq_layout.h"

namespace aqpim::kv {

std::size_t PqLayerVersion::parameter_bytes() const {
    std::size_t b = 0;
    for (const ProductQuantizer& q : k) b += q.parameter_bytes();
    for (const ProductQuantizer& q : v) b += q.parameter_bytes();
    return b;
}

namespace {

/// Train pqs[i] on xs[i] ([n_i][D]): one train_product_quantizers call per run of equal M and row
/// count (keys first, then values).
void train_batched(std::vector<ProductQuantizer>& pqs, const std::vector<const float*>& xs,
                   const std::vector<std::int64_t>& ns) {
    for (std::size_t a = 0; a < pqs.size();) {
        std::size_t b = a + 1;
        while (b < pqs.size() && pqs[b].M() == pqs[a].M() && ns[b] == ns[a]) ++b;
        train_product_quantizers(std::span(pqs).subspan(a, b - a), std::span<const float* const>(xs).subspan(a, b - a),
                                 ns[a]);
        a = b;
    }
}

}  // namespace

PqLayerVersion train_pq_layer_version(const PqKvParams& p, const KvShape& shape, int Mk, int Mv, PqTrainSet xk,
                                      PqTrainSet xv) {
    const int n_kv = shape.n_kv_head;
    AQPIM_ASSERT(int(xk.x.size()) == n_kv && int(xv.x.size()) == n_kv);
    std::vector<ProductQuantizer> all;
    std::vector<const float*> xs;
    std::vector<std::int64_t> ns;
    for (int ih = 0; ih < n_kv; ++ih) all.emplace_back(pq_key_params(p, shape, Mk)), xs.push_back(xk.x[ih]), ns.push_back(xk.n);
    for (int ih = 0; ih < n_kv; ++ih) all.emplace_back(pq_value_params(p, shape, Mv)), xs.push_back(xv.x[ih]), ns.push_back(xv.n);
    train_batched(all, xs, ns);
    PqLayerVersion v;
    v.k.assign(std::make_move_iterator(all.begin()), std::make_move_iterator(all.begin() + n_kv));
    v.v.assign(std::make_move_iterator(all.begin() + n_kv), std::make_move_iterator(all.end()));
    return v;
}

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
                const double angle = delta * double(inv_freq[i]);
                const float cs = float(std::cos(angle)), sn = float(std::sin(angle));
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
        for (std::int64_t j = 0; j < n * D; ++j) {
            const double x = xs[i][j], d = x - y[j];
            err += d * d;
            energy += x * x;
        }
    }
    return energy > 0 ? err / energy : 0.0;
}

PqLayerChoice choose_pq_layer(const PqKvParams& p, const KvShape& shape, std::size_t share, PqTrainSet xk,
                              PqTrainSet xv) {
    const int n_kv = shape.n_kv_head;
    const std::vector<int> ck = pq_m_candidates(p, shape, true), cv = pq_m_candidates(p, shape, false);
    std::vector<int> all_m = ck;
    all_m.insert(all_m.end(), cv.begin(), cv.end());
    std::sort(all_m.begin(), all_m.end());
    all_m.erase(std::unique(all_m.begin(), all_m.end()), all_m.end());
    const auto bytes_of = [&](int M) { return std::size_t(n_kv) * pq_token_code_bytes(M, p.nbits); };

    // Only m that can be part of a pair within the share are worth training.
    const std::size_t min_k = bytes_of(ck.front()), min_v = bytes_of(cv.front());
    AQPIM_ASSERT(min_k + min_v <= share);

    // One batched call per m: the heads' keys (when m suits keys) and values (when it suits values).
    struct Trained {
        int M;
        std::vector<ProductQuantizer> k, v;
        double err_k = -1, err_v = -1;
    };
    std::vector<Trained> trained;
    for (int M : all_m) {
        const bool for_k = std::find(ck.begin(), ck.end(), M) != ck.end() && bytes_of(M) + min_v <= share;
        const bool for_v = std::find(cv.begin(), cv.end(), M) != cv.end() && bytes_of(M) + min_k <= share;
        if (!for_k && !for_v) continue;
        std::vector<ProductQuantizer> pqs;
        std::vector<const float*> xs;
        std::vector<std::int64_t> ns;
        for (int ih = 0; for_k && ih < n_kv; ++ih)
            pqs.emplace_back(pq_key_params(p, shape, M)), xs.push_back(xk.x[ih]), ns.push_back(xk.n);
        for (int ih = 0; for_v && ih < n_kv; ++ih)
            pqs.emplace_back(pq_value_params(p, shape, M)), xs.push_back(xv.x[ih]), ns.push_back(xv.n);
        train_batched(pqs, xs, ns);
        Trained t{M, {}, {}};
        const std::size_t nk = for_k ? std::size_t(n_kv) : 0;
        t.k.assign(std::make_move_iterator(pqs.begin()), std::make_move_iterator(pqs.begin() + nk));
        t.v.assign(std::make_move_iterator(pqs.begin() + nk), std::make_move_iterator(pqs.end()));
        if (for_k) t.err_k = pq_relative_error(t.k, xk.x, xk.n);
        if (for_v) t.err_v = pq_relative_error(t.v, xv.x, xv.n);
        trained.push_back(std::move(t));
    }
    // The best pair within the share.
    const Trained *best_k = nullptr, *best_v = nullptr;
    double best = std::numeric_limits<double>::infinity();
    std::size_t best_bytes = 0;
    for (const Trained& a : trained) {
        if (a.err_k < 0) continue;
        for (const Trained& b : trained) {
            if (b.err_v < 0) continue;
            const std::size_t bytes = bytes_of(a.M) + bytes_of(b.M);
            if (bytes > share) continue;
            const double e = a.err_k + b.err_v;
            if (e < best || (e == best && bytes < best_bytes)) {
                best = e;
                best_bytes = bytes;
                best_k = &a;
                best_v = &b;
            }
        }
    }
    AQPIM_ASSERT(best_k != nullptr && best_v != nullptr);
    if (std::getenv("AQPIM_PQ_DEBUG")) {
        std::fprintf(stderr, "share %zu: Mk=%d (%.4f) Mv=%d (%.4f);", share, best_k->M, best_k->err_k, best_v->M, best_v->err_v);
        for (const Trained& t : trained) std::fprintf(stderr, " M%d k%.3f v%.3f", t.M, t.err_k, t.err_v);
        std::fprintf(stderr, "\n");
    }
    PqLayerChoice c;
    c.Mk = best_k->M;
    c.Mv = best_v->M;
    c.err_k = best_k->err_k;
    c.err_v = best_v->err_v;
    c.bytes = best_bytes;
    c.version.k = best_k->k;
    c.version.v = best_v->v;
    return c;
}

}  // namespace aqpim::kv
