#pragma once
// ProductQuantizer: a head vector of D dims is mapped to "quantizer space" by an optional
// per-channel scale, an optional orthogonal rotation and a subspace permutation, split into M
// contiguous subvectors of dsub = D / M dims, and each subvector replaced by the index of its
// nearest of ksub = 2^nbits centroids. Symbols as in faiss: D, M, nbits, dsub, ksub.
//
//   y = P · R · (x / s)            forward():  original space -> quantizer space
//   x = s ∘ (Rᵀ · Pᵀ · y)          inverse()
//   q·x = (P · R · (s ∘ q)) · y    transform_query(): so lookup tables are built in quantizer space
//
// s: per-channel scale (scale folding; 1 when off), R: rotation (identity, Hadamard with random
// signs, or random orthogonal), P: permutation from the subspace plan (RoPE pairs kept in one
// subspace, optionally variance-balanced across subspaces).

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/kmeans.h"
#include "aqpim/rope_pairs.h"

namespace aqpim {

/// How units (single dims, or RoPE pairs) are assigned to subspaces.
enum class SubspaceOrder {
    contiguous,         ///< in order (pairs adjacent)
    variance_balanced,  ///< greedy: units by decreasing variance to the subspace with least total variance
};
enum class Rotation { none, hadamard, random_orthogonal };

/// Parameters of a ProductQuantizer (validated by its constructor).
struct PQParams {
    int D = 128;      ///< vector dims
    int M = 32;       ///< subspaces; D % M == 0
    int nbits = 4;    ///< 4 or 8 bits per sub-code; ksub = 2^nbits
    RopePairs pairs = RopePairs::none;
    SubspaceOrder order = SubspaceOrder::contiguous;
    Rotation rotation = Rotation::none;  ///< hadamard needs D a power of two
    bool scale_folding = false;          ///< divide channels by their RMS over the training data
    KMeansParams kmeans{};               ///< kmeans.k is overwritten with ksub
    std::uint64_t seed = 1234;           ///< rotation signs / matrix
};

struct PqTransform;  // src/pq/pq_transform.h

/// What training learns beside the parameters, as save() stores it (docs/pq-format.md sections):
/// for containers that keep a quantizer in their own layout (the KV state, docs/kv-state.md).
struct PqTrainedParts {
    std::vector<float> centroids;          ///< [M][ksub][dsub]
    std::vector<float> scale;              ///< [D] with scale folding, else empty
    std::vector<std::int32_t> permutation; ///< [D]; empty: the identity
    std::vector<float> hadamard_signs;     ///< [D] with the Hadamard rotation, else empty
    std::vector<float> rotation;           ///< [D][D] row-major with the random rotation, else empty
};

/// out[r] = |rows[r]|^2 for n rows of `dim` floats (the centroid norms nearest-centroid search uses).
void squared_norms(const float* rows, std::int64_t n, int dim, float* out);

class ProductQuantizer {
public:
    ProductQuantizer() = default;
    explicit ProductQuantizer(const PQParams& params);

    int D() const { return params_.D; }
    int M() const { return params_.M; }
    int nbits() const { return params_.nbits; }
    int dsub() const { return params_.D / params_.M; }
    int ksub() const { return 1 << params_.nbits; }
    const PQParams& params() const { return params_; }
    bool is_trained() const { return trained_; }

    // ---- training -------------------------------------------------------------------------------
    /// Learn scale, plan and codebooks from x [n][D] (optional weights [n], finite, >= 0, not all
    /// zero). Weights only weigh k-means; scale (per-channel RMS, floored at 1e-3 x the mean RMS) and
    /// the variance-balanced plan use the unweighted data. The M subspaces are k-means problems
    /// 0..M-1 of one kmeans_batch call. Retraining replaces everything.
    KMeansStats train(const float* x, std::int64_t n, const float* weights = nullptr);

    // ---- space transforms (valid after train; input and output may be the same buffer) -----------
    void forward(const float* x, float* y, std::int64_t n) const;          ///< [n][D] -> [n][D]
    void inverse(const float* y, float* x, std::int64_t n) const;          ///< [n][D] -> [n][D]
    void transform_query(const float* q, float* qy, std::int64_t n) const;  ///< [n][D] -> [n][D]
    /// True when forward() is the identity (no scale folding, no rotation, identity permutation).
    bool is_identity_transform() const { return identity_; }
    /// The subspace plan is the identity permutation (not stored, not counted by parameter_bytes()).
    bool has_identity_permutation() const { return perm_identity_; }
    /// The permutation P [D] (y[i] = z[perm[i]]), empty before training.
    const std::vector<std::int32_t>& permutation() const { return perm_; }
    /// Per-channel scale s [D], empty when scale folding is off.
    const std::vector<float>& scale() const { return scale_; }
    /// Rotation R [D][D] row-major (random_orthogonal only, else empty).
    const std::vector<float>& rotation_matrix() const { return rotation_; }
    /// Hadamard signs [D] (hadamard only, else empty).
    const std::vector<float>& hadamard_signs() const { return hadamard_signs_; }

    // ---- codes ----------------------------------------------------------------------------------
    /// codes [n][M], one byte per sub-code (value < ksub): nearest centroid of each subvector of
    /// forward(x) (ties: lowest index).
    void encode(const float* x, std::int64_t n, std::uint8_t* codes) const;
    /// encode() against `centroids` [M][ksub][dsub] and their squared `norms` [M][ksub] (this
    /// quantizer's own transform): a caller that keeps the codebooks in another form (the KV
    /// cache's f16/int8 ones, widened per call) passes them, and `scratch` (grown to at most
    /// 256 x D floats and kept), so that coding a row per decode step allocates nothing.
    void encode_with(const float* centroids, const float* norms, const float* x, std::int64_t n, std::uint8_t* codes,
                     AlignedBuffer<float>& scratch) const;
    /// x [n][D] in the original space: inverse() of the concatenated centroids. Throws
    /// aqpim::Error on a code >= ksub.
    void decode(const std::uint8_t* codes, std::int64_t n, float* x) const;

    /// Codebooks in quantizer space: [M][ksub][dsub].
    const float* centroids() const { return centroids_.data(); }
    /// Squared norms of the centroids: [M][ksub]; null after release_centroid_norms().
    const float* centroid_norms() const { return centroid_norms_.size() != 0 ? centroid_norms_.data() : nullptr; }
    /// Free the centroids' squared norms (derived data, M x ksub floats): encode() then computes
    /// them per call. The KV cache does this so that it holds only the bytes it counts.
    void release_centroid_norms() { centroid_norms_ = AlignedBuffer<float>(); }

    /// Replace the codebooks of a trained quantizer with centroids [M][ksub][dsub] (finite; e.g.
    /// the same centroids rounded to f16) and recompute their norms; transforms are kept.
    void set_centroids(const float* centroids);
    /// Free the codebooks (and norms) of a trained quantizer whose owner keeps them in another
    /// form (the KV cache's f16 codebooks); it must get set_centroids() before it encodes, decodes
    /// or builds tables again. has_centroids() tells.
    void release_centroids();
    bool has_centroids() const { return centroids_.size() != 0; }

    /// Bytes this quantizer's parameters occupy in memory accounting (codebooks, scales,
    /// permutation, rotation), as stored by save(): the file's sections, without its fixed header
    /// and checksum (docs/pq-format.md). An identity permutation is not stored and not counted.
    std::size_t parameter_bytes() const;

    // ---- persistence (layout: docs/pq-format.md) ------------------------------------------------
    void save(std::ostream& out) const;
    static ProductQuantizer load(std::istream& in);  ///< throws aqpim::Error naming the bad field
    /// A trained quantizer from its parameters and parts, every part checked as load() checks it
    /// (sizes, finite values, positive scales, a pair-keeping permutation, ±1 signs, an orthogonal
    /// rotation): aqpim::Error "<what>: ..." naming the part.
    static ProductQuantizer from_parts(const PQParams& params, PqTrainedParts parts, std::string_view what = "pq parts");
    void save_file(const std::string& path) const;
    static ProductQuantizer load_file(const std::string& path);

private:
    PQParams params_{};
    bool trained_ = false;
    std::vector<std::int32_t> perm_;       ///< [D]: y[i] = z[perm_[i]] (z = rotated, scaled x)
    std::vector<float> scale_;             ///< [D] per-channel scale s (empty when off)
    std::vector<float> rotation_;          ///< [D][D] for random_orthogonal (empty otherwise)
    std::vector<float> hadamard_signs_;    ///< [D] ±1 for hadamard (empty otherwise)
    AlignedBuffer<float> centroids_;       ///< [M][ksub][dsub]
    AlignedBuffer<float> centroid_norms_;  ///< [M][ksub] (derived; released by release_centroid_norms)
    bool identity_ = true;                 ///< forward() is the identity (set_derived_)
    bool perm_identity_ = true;            ///< perm_ is the identity (set_derived_)

    /// The transform, its gains (scale, Hadamard signs and normalisation folded: pq_transform.h)
    /// computed into `gains` [2 D]: derived per call, so a quantizer holds only what it counts.
    /// Without key_gain (queries and the inverse) and without Hadamard signs, the query gain is
    /// the scale itself and nothing is computed (attention transforms every version per call).
    PqTransform transform_view_(float* gains, bool key_gain) const;
    KMeansParams kmeans_params_() const;  ///< params_.kmeans with k = ksub
    void set_derived_();
    /// Fit scale, rotation (or take `rotation` [D][D] when not null) and plan on x [n][D]; write the
    /// transformed data as xt [M][n][dsub]. z: scratch [n][D], used only with a rotation.
    void prepare_training_(const float* x, std::int64_t n, const float* rotation, float* z, float* xt);
    void finish_training_();  ///< centroid norms, trained_
    void assign_parts_(PqTrainedParts parts, std::string_view what);  ///< from_parts / load: check, take, finish

    friend KMeansStats train_product_quantizers(std::span<ProductQuantizer> pqs, std::span<const float* const> xs,
                                                std::int64_t n);
};

/// Train many quantizers (e.g. every layer and KV head of a model, keys and values) in one batched
/// k-means call: pqs[i] learns from xs[i] = [n][D]. All pqs must share D, M, nbits and k-means
/// options (max_iter, tol, seed, init, n_threads), else aqpim::Error; their other options (pairs,
/// order, rotation, scale folding, seed) may differ. Subspace m of pqs[i] is k-means problem i*M + m,
/// so pqs[0] gets exactly what train() gives it, and every pqs[i] gets the same scale, rotation and
/// plan as train(); the codebooks of pqs[i > 0] come from other k-means seeds (problem indices) and
/// so differ from a separate train() (same quality, not the same bits). Returns the call's stats
/// (sse [n_pqs * M]).
KMeansStats train_product_quantizers(std::span<ProductQuantizer> pqs, std::span<const float* const> xs,
                                     std::int64_t n);

}  // namespace aqpim
