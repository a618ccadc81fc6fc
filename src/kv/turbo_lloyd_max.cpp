// Lloyd-Max codebooks of the sphere-coordinate density, by Lloyd's iteration on a fine quadrature
// of it. In the angle φ (x = -cos φ) the density is ∝ sin^(dim-2) φ: smooth and bounded for every
// dim >= 2 (in x it is singular at ±1 for dim = 2), so a uniform grid in φ integrates it well.

#include "kv/turbo_lloyd_max.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <utility>

#include "aqpim/error.h"

namespace aqpim::kv {

namespace {

constexpr int kGridPoints = 1 << 16;  ///< quadrature cells over the support that carries mass
constexpr int kMaxIterations = 200000;
constexpr double kTolerance = 1e-14;  ///< largest centroid move (in x) that ends the iteration

/// The density on a grid of cells [e_j, e_j+1] (ascending in x), each holding its mass spread evenly,
/// so that the mass and moments below any threshold are continuous in it (Lloyd's iteration then
/// converges to the quantizer of the density, not of a set of atoms).
class Quadrature {
public:
    explicit Quadrature(int dim) {
        // Beyond |x| = 12/√dim the mass is below e^-70: the grid covers only where it is not.
        const double reach = std::min(1.0, 12.0 / std::sqrt(double(dim)));
        const double phi0 = std::acos(reach), h = (std::numbers::pi - 2 * phi0) / kGridPoints;
        e_.resize(kGridPoints + 1);
        for (int j = 0; j <= kGridPoints; ++j) e_[j] = -std::cos(phi0 + j * h);
        w_.assign(kGridPoints + 1, 0.0);
        root_.assign(kGridPoints + 1, 0.0);
        for (int j = 0; j < kGridPoints; ++j) {
            const double phi = phi0 + (j + 0.5) * h;  // midpoint rule in φ
            const double dens = dim == 2 ? 1.0 : std::exp((dim - 2) * std::log(std::sin(phi)));  // ∝ f(x) dx/dφ
            w_[j + 1] = w_[j] + dens;
            // f^(1/3) dx, for the starting point: the asymptotically optimal density of centroids
            const double dx = e_[j + 1] - e_[j];
            root_[j + 1] = root_[j] + std::cbrt(dens * h / dx) * dx;
        }
        const double total = w_.back();
        for (double& v : w_) v /= total;
        wx_.assign(kGridPoints + 1, 0.0);
        wxx_ = wx_;
        for (int j = 0; j < kGridPoints; ++j) {
            const double m = w_[j + 1] - w_[j], a = e_[j], b = e_[j + 1];
            wx_[j + 1] = wx_[j] + m * (a + b) / 2;
            wxx_[j + 1] = wxx_[j] + m * (a * a + a * b + b * b) / 3;
        }
    }
    double lo() const { return e_.front(); }
    double hi() const { return e_.back(); }
    /// Mass, first and second moment of x < t.
    void below(double t, double& mass, double& m1, double& m2) const {
        t = std::clamp(t, lo(), hi());
        const std::size_t j = std::min<std::size_t>(
            std::size_t(std::upper_bound(e_.begin(), e_.end(), t) - e_.begin()) - 1, kGridPoints - 1);
        const double a = e_[j], dens = (w_[j + 1] - w_[j]) / (e_[j + 1] - a), part = dens * (t - a);
        mass = w_[j] + part;
        m1 = wx_[j] + part * (a + t) / 2;
        m2 = wxx_[j] + part * (a * a + a * t + t * t) / 3;
    }
    /// Where the cumulative f^(1/3) reaches fraction p of its total.
    double root_quantile(double p) const {
        const double target = p * root_.back();
        const std::size_t j = std::min<std::size_t>(
            std::size_t(std::lower_bound(root_.begin() + 1, root_.end(), target) - root_.begin()) - 1, kGridPoints - 1);
        const double f = (target - root_[j]) / (root_[j + 1] - root_[j]);
        return e_[j] + f * (e_[j + 1] - e_[j]);
    }

private:
    std::vector<double> e_;               ///< [N + 1] cell edges
    std::vector<double> w_, wx_, wxx_;    ///< [N + 1] mass and moments of the cells below edge j (mass total 1)
    std::vector<double> root_;            ///< [N + 1] Σ f^(1/3) dx below edge j
};

/// Mass, first and second moment of the cell between thresholds a < b.
void cell(const Quadrature& f, double a, double b, double& mass, double& m1, double& m2) {
    double ma, m1a, m2a;
    f.below(a, ma, m1a, m2a);
    f.below(b, mass, m1, m2);
    mass -= ma;
    m1 -= m1a;
    m2 -= m2a;
}

SphereCodebook lloyd_max(int dim, int bits) {
    SphereCodebook cb;
    cb.dim = dim;
    cb.bits = bits;
    const int K = 1 << bits;
    if (bits == 0) {
        cb.centroids = {0.0f};
        cb.mse = 1.0 / dim;  // E x² of a unit-vector coordinate
        return cb;
    }
    const Quadrature f(dim);
    std::vector<double> c(K), t(K + 1);  // centroids; thresholds t[0] = lo, t[K] = hi
    for (int k = 0; k < K; ++k) c[k] = f.root_quantile((k + 0.5) / K);
    auto thresholds = [&] {
        t[0] = f.lo();
        t[K] = f.hi();
        for (int k = 1; k < K; ++k) t[k] = 0.5 * (c[k - 1] + c[k]);
    };
    for (int it = 0; it < kMaxIterations; ++it) {
        thresholds();
        std::vector<double> next(K);
        for (int k = 0; k < K; ++k) {
            double mass, m1, m2;
            cell(f, t[k], t[k + 1], mass, m1, m2);
            next[k] = mass > 0 ? m1 / mass : c[k];
        }
        for (int k = 0; k < K / 2; ++k) {  // the density is even: keep the codebook exactly symmetric
            const double m = 0.5 * (next[K - 1 - k] - next[k]);
            next[k] = -m;
            next[K - 1 - k] = m;
        }
        double moved = 0;
        for (int k = 0; k < K; ++k) moved = std::max(moved, std::fabs(next[k] - c[k]));
        c = std::move(next);
        if (moved < kTolerance) break;
    }
    thresholds();
    for (int k = 0; k < K; ++k) {
        double mass, m1, m2;
        cell(f, t[k], t[k + 1], mass, m1, m2);
        cb.mse += m2 - 2 * c[k] * m1 + c[k] * c[k] * mass;
    }
    for (int k = 0; k < K; ++k) cb.centroids.push_back(float(c[k]));
    for (int k = 0; k + 1 < K; ++k) cb.bounds.push_back(0.5f * (cb.centroids[k] + cb.centroids[k + 1]));
    return cb;
}

}  // namespace

const SphereCodebook& sphere_codebook(int dim, int bits) {
    AQPIM_CHECK(dim >= 2, "TurboQuant codebook: dimension {} must be at least 2", dim);
    AQPIM_CHECK(bits >= 0 && bits <= 8, "TurboQuant codebook: bits={} must be in 0..8", bits);
    static std::mutex mutex;
    static std::map<std::pair<int, int>, std::unique_ptr<SphereCodebook>> memo;
    std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<SphereCodebook>& slot = memo[{dim, bits}];
    if (!slot) slot = std::make_unique<SphereCodebook>(lloyd_max(dim, bits));
    return *slot;
}

}  // namespace aqpim::kv
