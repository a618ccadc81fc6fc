#include "pq/anisotropic_codes.h"

#include <vector>

#include "aqpim/error.h"
#include "aqpim/pq_kernels.h"
#include "aqpim/workspace.h"

namespace aqpim {

namespace {

/// The coder's buffers, a part of the caller's Workspace.
struct AnisotropicScratch {
    std::vector<float> columns;  ///< [M][dsub][ksub] the codebooks as columns
    std::vector<float> y, u;     ///< [n][D] the rows as keys and as queries, in quantizer space
    std::vector<float> dist, dot;  ///< [M][ksub] one row's distances to and dots with every centroid
    std::vector<float> loss;       ///< [ksub]
    std::size_t bytes() const {
        return heap_bytes(columns) + heap_bytes(y) + heap_bytes(u) + heap_bytes(dist) + heap_bytes(dot) + heap_bytes(loss);
    }
};

}  // namespace

void refine_codes_anisotropic(const ProductQuantizer& q, const float* centroids, const float* x, std::int64_t n,
                              double lambda, std::uint8_t* codes, int max_sweeps, Workspace* workspace) {
    AQPIM_CHECK(lambda >= 0, "refine_codes_anisotropic: lambda={} must be >= 0", lambda);
    if (lambda == 0 || n == 0) return;
    const int D = q.D(), M = q.M(), K = q.ksub(), ds = q.dsub();
    // The codebooks as columns [m][j][K] (every centroid's j-th dimension side by side), so that
    // the per-centroid sums below run over contiguous lanes; the rows' transforms, all at once.
    Workspace local;
    auto& [columns, y, u, dist, dot, loss] = workspace_or(workspace, local).get<AnisotropicScratch>();
    columns.resize(std::size_t(M) * ds * K);
    for (int m = 0; m < M; ++m)  // K is 16 or 256: a multiple of subspace_columns' 4
        subspace_columns(centroids + std::size_t(m) * K * ds, K, ds, columns.data() + std::size_t(m) * ds * K);
    y.resize(std::size_t(n) * D);
    u.resize(std::size_t(n) * D);
    q.forward(x, y.data(), n);
    q.transform_query(x, u.data(), n);
    dist.resize(std::size_t(M) * K);
    dot.resize(std::size_t(M) * K);
    loss.resize(std::size_t(K));
    for (std::int64_t i = 0; i < n; ++i) {
        const float* yi = y.data() + i * D;
        const float* ui = u.data() + i * D;
        double uu = 0, uy = 0;
        for (int d = 0; d < D; ++d) uu += double(ui[d]) * ui[d], uy += double(ui[d]) * yi[d];
        if (uu == 0) continue;  // a zero key scores 0 whatever its code
        // Per subspace and centroid: its squared distance to y and its dot with u.
        for (int m = 0; m < M; ++m) {
            float* dm = dist.data() + std::size_t(m) * K;
            float* um = dot.data() + std::size_t(m) * K;
            for (int k = 0; k < K; ++k) dm[k] = 0, um[k] = 0;
            for (int j = 0; j < ds; ++j) {
                const float yj = yi[m * ds + j], uj = ui[m * ds + j];
                const float* c = columns.data() + (std::size_t(m) * ds + j) * K;
                for (int k = 0; k < K; ++k) {
                    const float e = yj - c[k];
                    dm[k] += e * e;
                    um[k] += uj * c[k];
                }
            }
        }
        std::uint8_t* code = codes + i * M;
        double par = uy;  // u · (y - ŷ)
        for (int m = 0; m < M; ++m) par -= dot[std::size_t(m) * K + code[m]];
        const float w = float(lambda / uu);
        for (int sweep = 0; sweep < max_sweeps; ++sweep) {
            bool changed = false;
            for (int m = 0; m < M; ++m) {
                const float* dm = dist.data() + std::size_t(m) * K;
                const float* um = dot.data() + std::size_t(m) * K;
                const int cur = code[m];
                const double base = par + um[cur];  // the parallel error without subspace m's centroid
                const float base_f = float(base);
                for (int k = 0; k < K; ++k) {
                    const float p = base_f - um[k];
                    loss[k] = dm[k] + w * p * p;
                }
                int best = cur;  // the lowest index of the least loss, if below the current code's
                for (int k = 0; k < K; ++k)
                    if (loss[k] < loss[best]) best = k;
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
