#include "pq/anisotropic_codes.h"

#include <vector>

#include "aqpim/error.h"

namespace aqpim {

void refine_codes_anisotropic(const ProductQuantizer& q, const float* centroids, const float* x, std::int64_t n,
                              double lambda, std::uint8_t* codes, int max_sweeps) {
    AQPIM_CHECK(lambda >= 0, "refine_codes_anisotropic: lambda={} must be >= 0", lambda);
    if (lambda == 0 || n == 0) return;
    const int D = q.D(), M = q.M(), K = q.ksub(), ds = q.dsub();
    thread_local std::vector<float> y, u, dist, dot;
    y.resize(std::size_t(D));
    u.resize(std::size_t(D));
    dist.resize(std::size_t(M) * K);
    dot.resize(std::size_t(M) * K);
    for (std::int64_t i = 0; i < n; ++i) {
        q.forward(x + i * D, y.data(), 1);
        q.transform_query(x + i * D, u.data(), 1);
        double uu = 0, uy = 0;
        for (int d = 0; d < D; ++d) uu += double(u[d]) * u[d], uy += double(u[d]) * y[d];
        if (uu == 0) continue;  // a zero key scores 0 whatever its code
        // Per subspace and centroid: its squared distance to y and its dot with u.
        for (int m = 0; m < M; ++m) {
            const float* ym = y.data() + m * ds;
            const float* um = u.data() + m * ds;
            for (int k = 0; k < K; ++k) {
                const float* c = centroids + (std::size_t(m) * K + k) * ds;
                float d2 = 0, du = 0;
                for (int j = 0; j < ds; ++j) {
                    const float e = ym[j] - c[j];
                    d2 += e * e;
                    du += um[j] * c[j];
                }
                dist[std::size_t(m) * K + k] = d2;
                dot[std::size_t(m) * K + k] = du;
            }
        }
        std::uint8_t* code = codes + i * M;
        double par = uy;  // u · (y - ŷ)
        for (int m = 0; m < M; ++m) par -= dot[std::size_t(m) * K + code[m]];
        const double w = lambda / uu;
        for (int sweep = 0; sweep < max_sweeps; ++sweep) {
            bool changed = false;
            for (int m = 0; m < M; ++m) {
                const float* dm = dist.data() + std::size_t(m) * K;
                const float* um = dot.data() + std::size_t(m) * K;
                const int cur = code[m];
                const double base = par + um[cur];  // the parallel error without subspace m's centroid
                int best = cur;
                double best_loss = double(dm[cur]) + w * (base - um[cur]) * (base - um[cur]);
                for (int k = 0; k < K; ++k) {
                    const double p = base - um[k];
                    const double loss = double(dm[k]) + w * p * p;
                    if (loss < best_loss) best_loss = loss, best = k;
                }
                if (best != cur) {
                    code[m] = std::uint8_t(best);
                    par = base - um[best];
                    changed = true;
                }
            }
            if (!changed) break;
        }
    }
}

}  // namespace aqpim
