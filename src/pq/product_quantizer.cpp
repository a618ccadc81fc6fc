// ProductQuantizer: construction, training, transforms, encode/decode. Persistence: pq_io.cpp.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "aqpim/error.h"
#include "aqpim/pq.h"
#include "aqpim/threads.h"
#include "aqpim/workspace.h"
#include "pq/nearest_kernels.h"
#include "pq/pq_transform.h"
#include "pq/rotation.h"
#include "pq/subspace_plan.h"

namespace aqpim {

namespace {

constexpr std::int64_t kChunk = 256;       // vectors per encode chunk (scratch [kChunk][D] stays in cache)
constexpr double kScaleFloorRel = 1e-3;    // channel scale floor, relative to the mean channel RMS

void check_finite(const float* x, std::int64_t n, int D) {
    // exponent bits all ones = inf or NaN; an integer OR-reduction vectorises, the message needs a second look
    std::uint32_t bad = 0;
    for (std::int64_t i = 0; i < n * D; ++i) {
        std::uint32_t b;
        std::memcpy(&b, x + i, 4);
        bad |= std::uint32_t((b & 0x7f800000u) == 0x7f800000u);
    }
    if (!bad) return;
    for (std::int64_t i = 0; i < n * D; ++i)
        AQPIM_CHECK(std::isfinite(x[i]), "training vector {} dim {} is not finite ({})", i / D, i % D, x[i]);
}

// Per-channel sum[d] += Σ_i x[i][d] and sumsq[d] += Σ_i x[i][d]², x [n][D]. Float partial sums over
// blocks of 64 rows (vectorise over d), folded into doubles.
void channel_sums(const float* x, std::int64_t n, int D, double* sum, double* sumsq) {
    constexpr std::int64_t kBlock = 64;
    std::vector<float> s(D), s2(D);
    for (std::int64_t i0 = 0; i0 < n; i0 += kBlock) {
        std::fill(s.begin(), s.end(), 0.0f);
        std::fill(s2.begin(), s2.end(), 0.0f);
        for (std::int64_t i = i0; i < std::min(n, i0 + kBlock); ++i) {
            const float* row = x + i * D;
            for (int d = 0; d < D; ++d) {
                s[d] += row[d];
                s2[d] += row[d] * row[d];
            }
        }
        for (int d = 0; d < D; ++d) sum[d] += s[d], sumsq[d] += s2[d];
    }
}

// xt [M][n][dsub]: xt[m][i][j] = src[i][perm[m*dsub + j]] · pgain[m*dsub + j] (pgain [D] or null).
// DS > 0: dsub known at compile time (the common 2, 4, 8, 16), so the inner copy unrolls.
template <int DS>
void gather_subspaces_impl(const float* src, std::int64_t n, int D, int dsub, const std::int32_t* perm,
                           const float* pgain, float* xt) {
    const int ds = DS > 0 ? DS : dsub, M = D / ds;
    for (std::int64_t i = 0; i < n; ++i) {
        const float* row = src + i * D;
        for (int m = 0; m < M; ++m) {
            const std::int32_t* pm = perm + m * ds;
            float* out = xt + (std::int64_t(m) * n + i) * ds;
            if (pgain)
                for (int j = 0; j < ds; ++j) out[j] = row[pm[j]] * pgain[m * ds + j];
            else
                for (int j = 0; j < ds; ++j) out[j] = row[pm[j]];
        }
    }
}

void gather_subspaces(const float* src, std::int64_t n, int D, int dsub, const std::int32_t* perm, const float* pgain,
                      float* xt) {
    switch (dsub) {
        case 2: return gather_subspaces_impl<2>(src, n, D, dsub, perm, pgain, xt);
        case 4: return gather_subspaces_impl<4>(src, n, D, dsub, perm, pgain, xt);
        case 8: return gather_subspaces_impl<8>(src, n, D, dsub, perm, pgain, xt);
        case 16: return gather_subspaces_impl<16>(src, n, D, dsub, perm, pgain, xt);
        default: return gather_subspaces_impl<0>(src, n, D, dsub, perm, pgain, xt);
    }
}

}  // namespace

// ---- construction -------------------------------------------------------------------------------

ProductQuantizer::ProductQuantizer(const PQParams& params) : params_(params) {
    check_subspace_plan(params.D, params.M, params.pairs);
    AQPIM_CHECK(params.nbits == 4 || params.nbits == 8, "nbits={}: expected 4 or 8", params.nbits);
    AQPIM_CHECK(params.pairs == RopePairs::none || params.pairs == RopePairs::interleaved ||
                    params.pairs == RopePairs::neox,
                "pairs={}: not a RopePairs value", int(params.pairs));
    AQPIM_CHECK(params.order == SubspaceOrder::contiguous || params.order == SubspaceOrder::variance_balanced,
                "order={}: not a SubspaceOrder value", int(params.order));
    AQPIM_CHECK(params.rotation == Rotation::none || params.rotation == Rotation::hadamard ||
                    params.rotation == Rotation::random_orthogonal,
                "rotation={}: not a Rotation value", int(params.rotation));
    AQPIM_CHECK(params.rotation != Rotation::hadamard || is_power_of_two(params.D),
                "D={}: the Hadamard rotation needs D a power of two", params.D);
    const KMeansParams& km = params.kmeans;
    AQPIM_CHECK(km.max_iter >= 0, "kmeans.max_iter={}: expected >= 0", km.max_iter);
    AQPIM_CHECK(std::isfinite(km.tol) && km.tol >= 0, "kmeans.tol={}: expected finite and >= 0", km.tol);
    AQPIM_CHECK(km.init == KMeansInit::kmeanspp || km.init == KMeansInit::random, "kmeans.init={}: not a KMeansInit value",
                int(km.init));
    AQPIM_CHECK(km.n_threads >= 0, "kmeans.n_threads={}: expected >= 0 (0 = default)", km.n_threads);
    params_.kmeans.k = ksub();
}

KMeansParams ProductQuantizer::kmeans_params_() const {
    KMeansParams kp = params_.kmeans;
    kp.k = ksub();
    return kp;
}

PqTransform ProductQuantizer::transform_view_(float* gains, bool key_gain) const {
    PqTransform t;
    const int D = t.D = params_.D;
    const bool scaled = !scale_.empty(), hadamard = !hadamard_signs_.empty();
    if (scaled && !hadamard && !key_gain) {  // the query gain is the scale itself (c = sign = 1)
        t.query_gain = scale_.data();
    } else if (scaled || hadamard) {  // computed per call, not kept: they are not counted in parameter_bytes()
        const float c = hadamard ? float(1.0 / std::sqrt(double(D))) : 1.0f;
        for (int d = 0; d < D; ++d) {
            const float sign = hadamard ? hadamard_signs_[d] : 1.0f, s = scaled ? scale_[d] : 1.0f;
            gains[d] = c * sign / s;
            gains[D + d] = c * sign * s;
        }
        t.key_gain = gains;
        t.query_gain = gains + D;
    }
    t.hadamard = !hadamard_signs_.empty();
    t.rotation = rotation_.empty() ? nullptr : rotation_.data();
    t.perm = perm_identity_ ? nullptr : perm_.data();
    return t;
}

void ProductQuantizer::set_derived_() {
    perm_identity_ = is_identity_permutation(perm_);
    identity_ = scale_.empty() && hadamard_signs_.empty() && rotation_.empty() && perm_identity_;
}

// ---- training -----------------------------------------------------------------------------------

void ProductQuantizer::prepare_training_(const float* x, std::int64_t n, const float* rotation, float* z,
                                         float* xt) {
    const int D = params_.D, M = params_.M, ds = dsub();
    const bool rotated = params_.rotation != Rotation::none;
    const bool balanced = params_.order == SubspaceOrder::variance_balanced;
    scale_.clear();
    rotation_.clear();
    hadamard_signs_.clear();
    perm_.clear();  // identity while z is computed
    trained_ = false;

    // one pass of channel statistics over x: for the scale, and for the plan when z = x / s
    std::vector<double> sum(D, 0.0), sumsq(D, 0.0);  // [D]
    if (params_.scale_folding || (balanced && !rotated)) channel_sums(x, n, D, sum.data(), sumsq.data());
    // s[d] = RMS of channel d over x, floored (a dead channel must not blow up 1/s)
    if (params_.scale_folding) {
        double mean_rms = 0;
        std::vector<double> rms(D);
        for (int d = 0; d < D; ++d) mean_rms += (rms[d] = std::sqrt(sumsq[d] / double(n)));
        mean_rms /= D;
        const double floor = mean_rms > 0 ? kScaleFloorRel * mean_rms : 1.0;
        scale_.resize(D);
        for (int d = 0; d < D; ++d) scale_[d] = float(std::max(rms[d], floor));
    }
    if (params_.rotation == Rotation::hadamard) hadamard_signs_ = random_signs(D, params_.seed);
    if (params_.rotation == Rotation::random_orthogonal)
        rotation_ = rotation ? std::vector<float>(rotation, rotation + std::size_t(D) * D)
                             : random_orthogonal(D, params_.seed);
    set_derived_();

    // src: z = R · (x / s) [n][D] when rotated; else x itself, with gain 1/s applied on the way
    const float* src = x;
    std::vector<float> gains(2 * std::size_t(D));
    PqTransform tf = transform_view_(gains.data(), true);  // perm_ is empty: z, not y
    const float* gain = tf.key_gain;                 // [D] 1/s or null
    if (rotated) {
        std::vector<float> scratch(2 * std::size_t(D));
        for (std::int64_t i = 0; i < n; ++i) tf.forward_one(x + i * D, gain, z + i * D, scratch.data());
        src = z;
        gain = nullptr;
    }
    std::vector<float> var;  // [D] variance of z
    if (balanced) {
        if (rotated) {
            std::fill(sum.begin(), sum.end(), 0.0);
            std::fill(sumsq.begin(), sumsq.end(), 0.0);
            channel_sums(z, n, D, sum.data(), sumsq.data());
        }
        var.resize(D);
        for (int d = 0; d < D; ++d) {
            const double g = gain ? double(gain[d]) * gain[d] : 1.0;  // stats of x, z = x · gain
            const double mean = sum[d] / double(n);
            var[d] = float(std::max(sumsq[d] / double(n) - mean * mean, 0.0) * g);
        }
    }
    perm_ = make_subspace_plan(D, M, params_.pairs, params_.order, var.empty() ? nullptr : var.data());

    // xt[m][i][j] = src[i][perm[m*dsub + j]] · gain[perm[m*dsub + j]]
    std::vector<float> pgain;  // [D] gain in quantizer order
    if (gain) {
        pgain.resize(D);
        for (int k = 0; k < D; ++k) pgain[k] = gain[perm_[k]];
    }
    gather_subspaces(src, n, D, ds, perm_.data(), gain ? pgain.data() : nullptr, xt);
    set_derived_();  // now with the plan
}

namespace {
/// Rows of a fixed width: the compiler vectorises across rows (4-5x at dsub 2-4, where the runtime
/// width did not), with each row's sum in the same order, so the norms are bit-identical.
template <int DIM>
void squared_norms_of_width(const float* rows, std::int64_t n, float* out) {
    for (std::int64_t r = 0; r < n; ++r) {
        const float* v = rows + r * DIM;
        float s = 0;
#pragma GCC unroll 16
        for (int j = 0; j < DIM; ++j) s += v[j] * v[j];
        out[r] = s;
    }
}
}  // namespace

void squared_norms(const float* rows, std::int64_t n, int dim, float* out) {
    switch (dim) {  // the dsub of 4-bit codebooks at head_dim 64-128 (m = D/2 .. D/16)
        case 2: return squared_norms_of_width<2>(rows, n, out);
        case 4: return squared_norms_of_width<4>(rows, n, out);
        case 8: return squared_norms_of_width<8>(rows, n, out);
        case 16: return squared_norms_of_width<16>(rows, n, out);
        default: break;
    }
    for (std::int64_t r = 0; r < n; ++r) {
        const float* v = rows + r * dim;
        float s = 0;
        for (int j = 0; j < dim; ++j) s += v[j] * v[j];
        out[r] = s;
    }
}

void ProductQuantizer::finish_training_() {
    const int M = params_.M, K = ksub();
    centroid_norms_.resize(std::size_t(M) * K);
    squared_norms(centroids_.data(), std::int64_t(M) * K, dsub(), centroid_norms_.data());
    trained_ = true;
}

void ProductQuantizer::set_centroids(const float* centroids) {
    AQPIM_CHECK(trained_, "set_centroids: the ProductQuantizer is not trained");
    const std::size_t n = std::size_t(params_.M) * ksub() * dsub();
    for (std::size_t i = 0; i < n; ++i)
        AQPIM_CHECK(std::isfinite(centroids[i]), "set_centroids: centroid value {} is not finite ({})", i, centroids[i]);
    if (centroids_.size() != n) centroids_.resize(n);
    std::copy_n(centroids, n, centroids_.data());
    finish_training_();
}

void ProductQuantizer::release_centroids() {
    centroids_ = AlignedBuffer<float>();
    centroid_norms_ = AlignedBuffer<float>();
}

KMeansStats ProductQuantizer::train(const float* x, std::int64_t n, const float* weights) {
    AQPIM_CHECK(n >= 1, "empty training set (n={})", n);
    AQPIM_CHECK(n <= INT_MAX, "training set of n={} vectors: at most {}", n, INT_MAX);
    AQPIM_CHECK(x != nullptr, "train: x is null");
    check_finite(x, n, params_.D);
    std::vector<float> wt;  // [M][n]: the same weights for every subspace
    if (weights) {
        double total = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            AQPIM_CHECK(std::isfinite(weights[i]) && weights[i] >= 0, "weight {} = {}: expected finite and >= 0", i,
                        weights[i]);
            total += weights[i];
        }
        AQPIM_CHECK(total > 0, "all {} training weights are zero", n);
        wt.resize(std::size_t(params_.M) * n);
        for (int m = 0; m < params_.M; ++m) std::memcpy(wt.data() + m * n, weights, sizeof(float) * n);
    }
    auto xt = std::make_unique_for_overwrite<float[]>(std::size_t(n) * params_.D);  // [M][n][dsub]
    const std::size_t z_size = params_.rotation == Rotation::none ? 0 : std::size_t(n) * params_.D;
    auto z = std::make_unique_for_overwrite<float[]>(z_size);  // [n][D] scratch
    prepare_training_(x, n, nullptr, z.get(), xt.get());
    centroids_.resize(std::size_t(params_.M) * ksub() * dsub());
    KMeansStats stats = kmeans_batch(kmeans_params_(), params_.M, int(n), dsub(), xt.get(),
                                     wt.empty() ? nullptr : wt.data(), centroids_.data());
    finish_training_();
    return stats;
}

KMeansStats train_product_quantizers(std::span<ProductQuantizer> pqs, std::span<const float* const> xs,
                                     std::int64_t n) {
    AQPIM_CHECK(pqs.size() == xs.size(), "train_product_quantizers: {} quantizers but {} training sets", pqs.size(),
                xs.size());
    if (pqs.empty()) return {};
    AQPIM_CHECK(n >= 1, "empty training set (n={})", n);
    AQPIM_CHECK(n <= INT_MAX, "training set of n={} vectors: at most {}", n, INT_MAX);
    const PQParams& p0 = pqs[0].params();
    for (std::size_t i = 0; i < pqs.size(); ++i) {
        const PQParams& p = pqs[i].params();
        AQPIM_CHECK(p.D == p0.D && p.M == p0.M && p.nbits == p0.nbits,
                    "quantizer {} has D={} M={} nbits={}, quantizer 0 has D={} M={} nbits={}: all must match", i, p.D,
                    p.M, p.nbits, p0.D, p0.M, p0.nbits);
        const KMeansParams &a = p.kmeans, &b = p0.kmeans;
        AQPIM_CHECK(a.max_iter == b.max_iter && a.tol == b.tol && a.seed == b.seed && a.init == b.init &&
                        a.n_threads == b.n_threads,
                    "quantizer {} has other k-means options than quantizer 0: all must match (one batched call)", i);
        AQPIM_CHECK(xs[i] != nullptr, "training set {} is null", i);
    }
    const int D = p0.D, M = p0.M;
    const std::int64_t n_pq = std::int64_t(pqs.size()), per_pq = n * D;

    // random orthogonal matrices are O(D^3) to build: once per distinct seed
    std::map<std::uint64_t, std::vector<float>> rotations;  // seed -> R [D][D]
    for (auto& pq : pqs)
        if (pq.params().rotation == Rotation::random_orthogonal) rotations[pq.params().seed];
    std::vector<std::pair<const std::uint64_t, std::vector<float>>*> todo;
    for (auto& entry : rotations) todo.push_back(&entry);
    parallel_for(
        std::int64_t(todo.size()), [&](std::int64_t i) { todo[i]->second = random_orthogonal(D, todo[i]->first); },
        p0.kmeans.n_threads);

    // xt [n_pq][M][n][dsub]: problem i*M + m is subspace m of quantizer i
    // (not zeroed: every element is written; zeroing 64 MiB for a whole model costs more than the transforms)
    auto xt = std::make_unique_for_overwrite<float[]>(std::size_t(n_pq) * per_pq);
    const int n_threads =
        int(std::min<std::int64_t>(p0.kmeans.n_threads > 0 ? p0.kmeans.n_threads : default_threads(), n_pq));
    const bool any_rotation = std::any_of(pqs.begin(), pqs.end(), [](const ProductQuantizer& pq) {
        return pq.params().rotation != Rotation::none;
    });
    // [n_threads][n][D] scratch
    auto z = std::make_unique_for_overwrite<float[]>(any_rotation ? std::size_t(n_threads) * per_pq : 0);
    parallel_for(
        n_threads,
        [&](std::int64_t t) {  // contiguous range of quantizers per worker, each with its own scratch
            std::int64_t lo = n_pq * t / n_threads, hi = n_pq * (t + 1) / n_threads;
            for (std::int64_t i = lo; i < hi; ++i) {
                check_finite(xs[i], n, D);  // here, so the data is cache-hot for the transforms
                ProductQuantizer& pq = pqs[i];
                const float* R = pq.params().rotation == Rotation::random_orthogonal
                                     ? rotations.at(pq.params().seed).data()
                                     : nullptr;
                pq.prepare_training_(xs[i], n, R, any_rotation ? z.get() + t * per_pq : nullptr, xt.get() + i * per_pq);
            }
        },
        n_threads);

    AlignedBuffer<float> centroids(std::size_t(n_pq) * M * pqs[0].ksub() * pqs[0].dsub());  // [n_pq][M][ksub][dsub]
    KMeansStats stats = kmeans_batch(pqs[0].kmeans_params_(), n_pq * M, int(n), pqs[0].dsub(), xt.get(), nullptr,
                                     centroids.data());
    const std::size_t per_cb = std::size_t(M) * pqs[0].ksub() * pqs[0].dsub();
    for (std::int64_t i = 0; i < n_pq; ++i) {
        pqs[i].centroids_.resize(per_cb);
        std::memcpy(pqs[i].centroids_.data(), centroids.data() + i * per_cb, sizeof(float) * per_cb);
        pqs[i].finish_training_();
    }
    return stats;
}

// ---- transforms ---------------------------------------------------------------------------------

namespace {

/// [2D] transform scratch and [2D] gains for forward, transform_query and inverse, on the stack up to
/// head_dim 256. Attention transforms every codebook version's queries and result per call: a heap
/// allocation each was about 0.7% of a batch-32 x 8K decode step.
using TransformScratch = LocalBuffer<float, 4 * 256>;

}  // namespace

void ProductQuantizer::forward(const float* x, float* y, std::int64_t n) const {
    AQPIM_CHECK(trained_, "forward: the ProductQuantizer is not trained");
    if (identity_) {
        if (x != y) std::memmove(y, x, sizeof(float) * std::size_t(n) * params_.D);
        return;
    }
    const int D = params_.D;
    TransformScratch own{4 * std::size_t(D)};
    float* scratch = own.data();
    PqTransform tf = transform_view_(scratch + 2 * D, true);
    for (std::int64_t i = 0; i < n; ++i) tf.forward_one(x + i * D, tf.key_gain, y + i * D, scratch);
}

void ProductQuantizer::transform_query(const float* q, float* qy, std::int64_t n) const {
    AQPIM_CHECK(trained_, "transform_query: the ProductQuantizer is not trained");
    if (identity_) {
        if (q != qy) std::memmove(qy, q, sizeof(float) * std::size_t(n) * params_.D);
        return;
    }
    const int D = params_.D;
    TransformScratch own{4 * std::size_t(D)};
    float* scratch = own.data();
    PqTransform tf = transform_view_(scratch + 2 * D, false);
    for (std::int64_t i = 0; i < n; ++i) tf.forward_one(q + i * D, tf.query_gain, qy + i * D, scratch);
}

void ProductQuantizer::inverse(const float* y, float* x, std::int64_t n) const {
    AQPIM_CHECK(trained_, "inverse: the ProductQuantizer is not trained");
    if (identity_) {
        if (x != y) std::memmove(x, y, sizeof(float) * std::size_t(n) * params_.D);
        return;
    }
    const int D = params_.D;
    TransformScratch own{4 * std::size_t(D)};
    float* scratch = own.data();
    PqTransform tf = transform_view_(scratch + 2 * D, false);
    for (std::int64_t i = 0; i < n; ++i) tf.inverse_one(y + i * D, x + i * D, scratch);
}

// ---- codes --------------------------------------------------------------------------------------

void ProductQuantizer::encode(const float* x, std::int64_t n, std::uint8_t* codes) const {
    AQPIM_CHECK(trained_ && has_centroids(), "encode: the ProductQuantizer is not trained or has no codebooks");
    AlignedBuffer<float> own_norms;  // released norms: computed for this call
    const float* norms = centroid_norms();
    if (!norms) {
        own_norms.resize(std::size_t(params_.M) * ksub());
        squared_norms(centroids_.data(), std::int64_t(own_norms.size()), dsub(), own_norms.data());
        norms = own_norms.data();
    }
    AlignedBuffer<float> scratch;
    encode_with(centroids_.data(), norms, x, n, codes, scratch);
}

void ProductQuantizer::encode_with(const float* centroids, const float* norms, const float* x, std::int64_t n,
                                   std::uint8_t* codes, AlignedBuffer<float>& scratch) const {
    AQPIM_CHECK(trained_, "encode: the ProductQuantizer is not trained");
    AQPIM_CHECK(n >= 0, "encode: n={}: expected >= 0", n);
    const int D = params_.D, M = params_.M, K = ksub(), ds = dsub();
    const std::size_t y_size = identity_ ? 0 : std::size_t(std::min(kChunk, n)) * D;  // [chunk][D] quantizer space
    if (scratch.size() < y_size) scratch.resize(y_size);
    std::int32_t idx[kChunk];
    for (std::int64_t i0 = 0; i0 < n; i0 += kChunk) {
        const std::int64_t nc = std::min(kChunk, n - i0);
        const float* src = x + i0 * D;
        if (!identity_) {
            forward(src, scratch.data(), nc);
            src = scratch.data();
        }
        std::uint8_t* out = codes + i0 * M;
        if (nc == 1 && K == 16 && active_simd_level() == SimdLevel::avx512) {
            nearest_row16_avx512(src, M, ds, centroids, norms, out);
            continue;
        }
        for (int m = 0; m < M; ++m) {
            nearest_centroid(src + m * ds, nc, D, ds, centroids + std::int64_t(m) * K * ds, norms + std::int64_t(m) * K,
                             K, idx, nullptr);
            for (std::int64_t i = 0; i < nc; ++i) out[i * M + m] = std::uint8_t(idx[i]);
        }
    }
}

void ProductQuantizer::decode(const std::uint8_t* codes, std::int64_t n, float* x) const {
    AQPIM_CHECK(trained_ && has_centroids(), "decode: the ProductQuantizer is not trained or has no codebooks");
    AQPIM_CHECK(n >= 0, "decode: n={}: expected >= 0", n);
    const int D = params_.D, M = params_.M, K = ksub(), ds = dsub();
    for (std::int64_t i = 0; i < n; ++i) {  // x <- y = concatenated centroids (quantizer space)
        const std::uint8_t* c = codes + i * M;
        float* xi = x + i * D;
        if (K < 256) {  // 8-bit codes are always in range
            std::uint8_t top = 0;
            for (int m = 0; m < M; ++m) top = std::max(top, c[m]);
            if (top >= K)
                for (int m = 0; m < M; ++m)
                    AQPIM_CHECK(c[m] < K, "decode: code {} of vector {} subspace {}: expected < ksub={}", c[m], i, m, K);
        }
        for (int m = 0; m < M; ++m) {
            const float* cent = centroids_.data() + (std::int64_t(m) * K + c[m]) * ds;
            for (int j = 0; j < ds; ++j) xi[m * ds + j] = cent[j];
        }
    }
    if (!identity_) inverse(x, x, n);
}

}  // namespace aqpim
