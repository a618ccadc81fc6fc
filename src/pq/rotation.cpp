#include "pq/rotation.h"

#include <cmath>
#include <numbers>

#include "aqpim/error.h"

namespace aqpim {

namespace {

// splitmix64: small, fast, identical on every platform.
struct SplitMix64 {
    std::uint64_t s;
    std::uint64_t next() {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform_open() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
};

// Domain tags so the signs and the matrix of one seed are unrelated streams.
constexpr std::uint64_t kSignsTag = 0x5349474e53000001ull;
constexpr std::uint64_t kMatrixTag = 0x524f544d41540002ull;
constexpr std::uint64_t kGaussianTag = 0x4741555353000003ull;

/// g[0..n) standard normal draws from rng (Box-Muller, two per pair of uniforms).
void fill_gaussian(SplitMix64& rng, double* g, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 2) {
        double r = std::sqrt(-2.0 * std::log(rng.uniform_open())), t = 2 * std::numbers::pi * rng.uniform_open();
        g[i] = r * std::cos(t);
        if (i + 1 < n) g[i + 1] = r * std::sin(t);
    }
}

}  // namespace

namespace {

// Stages h = 1, 2, 4 of the transform on 8 values, in registers.
inline void fwht8(float* x) {
    float a0 = x[0] + x[1], a1 = x[0] - x[1], a2 = x[2] + x[3], a3 = x[2] - x[3];
    float a4 = x[4] + x[5], a5 = x[4] - x[5], a6 = x[6] + x[7], a7 = x[6] - x[7];
    float b0 = a0 + a2, b1 = a1 + a3, b2 = a0 - a2, b3 = a1 - a3;
    float b4 = a4 + a6, b5 = a5 + a7, b6 = a4 - a6, b7 = a5 - a7;
    x[0] = b0 + b4, x[1] = b1 + b5, x[2] = b2 + b6, x[3] = b3 + b7;
    x[4] = b0 - b4, x[5] = b1 - b5, x[6] = b2 - b6, x[7] = b3 - b7;
}

}  // namespace

void fwht(float* x, int D) {
    AQPIM_ASSERT(is_power_of_two(D));
    int h = 1;
    if (D >= 8) {
        for (int i = 0; i < D; i += 8) fwht8(x + i);
        h = 8;
    }
    for (; h < D; h *= 2)  // contiguous runs of h >= 8: the inner loop vectorises
        for (int i = 0; i < D; i += 2 * h)
            for (int j = i; j < i + h; ++j) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

std::vector<float> random_signs(int D, std::uint64_t seed) {
    SplitMix64 rng{seed ^ kSignsTag};
    std::vector<float> signs(D);
    for (int d = 0; d < D; ++d) signs[d] = (rng.next() >> 63) ? -1.0f : 1.0f;
    return signs;
}

void hadamard_rotate(const float* signs, int D, float* x, bool transpose) {
    const float norm = float(1.0 / std::sqrt(double(D)));
    if (!transpose) {  // H · diag(signs) · x / sqrt(D)
        for (int d = 0; d < D; ++d) x[d] *= signs[d];
        fwht(x, D);
        for (int d = 0; d < D; ++d) x[d] *= norm;
    } else {  // diag(signs) · H · x / sqrt(D)
        fwht(x, D);
        for (int d = 0; d < D; ++d) x[d] *= signs[d] * norm;
    }
}

std::vector<float> random_orthogonal(int D, std::uint64_t seed) {
    AQPIM_CHECK(D >= 1, "random_orthogonal: D={}: expected >= 1", D);
    SplitMix64 rng{seed ^ kMatrixTag};
    // g [D][D] Gaussian (Box-Muller), rows orthonormalised in order by modified Gram-Schmidt, twice
    // against earlier rows ("twice is enough") for orthogonality to double rounding.
    std::vector<double> g(std::size_t(D) * D);
    fill_gaussian(rng, g.data(), g.size());
    for (int r = 0; r < D; ++r) {
        double* row = g.data() + std::size_t(r) * D;
        for (int pass = 0; pass < 2; ++pass)
            for (int p = 0; p < r; ++p) {
                const double* prev = g.data() + std::size_t(p) * D;
                double dot = 0;
                for (int d = 0; d < D; ++d) dot += row[d] * prev[d];
                for (int d = 0; d < D; ++d) row[d] -= dot * prev[d];
            }
        double nrm = 0;
        for (int d = 0; d < D; ++d) nrm += row[d] * row[d];
        nrm = std::sqrt(nrm);
        AQPIM_ASSERT(nrm > 1e-12);  // a Gaussian matrix is full rank with probability 1
        for (int d = 0; d < D; ++d) row[d] /= nrm;
    }
    std::vector<float> R(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) R[i] = float(g[i]);
    return R;
}

std::vector<float> random_gaussian(std::size_t n, std::uint64_t seed) {
    SplitMix64 rng{seed ^ kGaussianTag};
    std::vector<double> g(n);
    fill_gaussian(rng, g.data(), n);
    return std::vector<float>(g.begin(), g.end());
}

void matrix_rotate(const float* R, int D, const float* x, float* y, bool transpose) {
    if (!transpose) {  // y[r] = Σ_c R[r][c] x[c]
        // 8 partial sums in a fixed order: vectorisable without -ffast-math, same result everywhere.
        const int d8 = D / 8 * 8;
        for (int r = 0; r < D; ++r) {
            const float* row = R + std::size_t(r) * D;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int c = 0; c < d8; c += 8)
                for (int k = 0; k < 8; ++k) acc[k] += row[c + k] * x[c + k];
            float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (int c = d8; c < D; ++c) sum += row[c] * x[c];
            y[r] = sum;
        }
    } else {  // y = Σ_r x[r] · R[r][:]  (axpy form, vectorises)
        for (int c = 0; c < D; ++c) y[c] = 0;
        for (int r = 0; r < D; ++r) {
            const float* row = R + std::size_t(r) * D;
            const float xr = x[r];
            for (int c = 0; c < D; ++c) y[c] += xr * row[c];
        }
    }
}

}  // namespace aqpim
