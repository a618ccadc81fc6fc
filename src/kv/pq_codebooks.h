#pragma once
// Training the quantizers of one layer of one sequence: one codebook version (every KV head, keys
// and values, batched), and for bits= the choice of m for keys and values from calibration error.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "aqpim/aligned.h"
#include "aqpim/half.h"
#include "aqpim/kv_pq.h"
#include "kv/pq_compact_centroids.h"

namespace aqpim::kv {

/// The quantizers of one codebook version of one layer: [n_kv_head] each.
struct PqLayerVersion {
    std::vector<ProductQuantizer> k, v;
    /// cb=f16 / cb=int8: the centroids of k[ih] / v[ih] as stored; the quantizers then hold none.
    std::vector<CompactCentroids> kc, vc;

    /// Bytes of the parameters as held: docs/pq-format.md sections, centroids as stored (cb=); a
    /// permutation is counted unless the plan is the identity by construction (one the data made
    /// the identity is not stored, and counted all the same: the bytes do not depend on the values).
    std::size_t parameter_bytes() const;
    bool compact() const { return !kc.empty(); }
    /// Keep the centroids rounded to `storage` (f16 or int8) only and release the quantizers' f32
    /// copies.
    void store_compact(CodebookStorage storage);
    /// Take centroids already stored (a state file's) and release the quantizers' f32 copies.
    void adopt_compact(std::vector<CompactCentroids> k_centroids, std::vector<CompactCentroids> v_centroids);
    /// Once trained: keep only what parameter_bytes() counts. f16/int8: store_compact(); f32:
    /// release the centroids' norms (derived; encoding computes them per call).
    void keep_counted_only(CodebookStorage storage);
    /// Quantizer ih of keys or values ready to encode, decode and build tables: the stored one, or
    /// with compact codebooks `scratch` set to it with the centroids widened to f32.
    const ProductQuantizer& quantizer(bool value, int ih, ProductQuantizer& scratch) const;
    /// With compact codebooks: head ih's key or value centroids widened to f32 into `out` (what
    /// attention passes as PqAttentionOptions::k/v_centroids; cheaper than quantizer()). Null
    /// without.
    const float* widened_centroids(bool value, int ih, std::vector<float>& out) const;
    /// Request head ih's parameters (key and value centroids as stored, scales, permutations) into
    /// L2: a decode step reads them once per call, cold (docs/pq-kernels.md "Parameters ahead").
    void prefetch(int ih) const;
};

/// Training rows of one stream: [n][head_dim] per KV head.
struct PqTrainSet {
    std::span<const float* const> x;  ///< [n_kv_head] of [n][head_dim]
    std::int64_t n = 0;
};

/// Train one version: head ih's keys with Mk[ih] subspaces on xk, its values with Mv[ih] on xv. All
/// quantizers sharing M and row count train in one train_product_quantizers call: with one m and
/// as many key rows as value rows, every head's keys and values in one call.
PqLayerVersion train_pq_layer_version(const PqKvParams& p, const KvShape& shape, std::span<const int> Mk,
                                      std::span<const int> Mv, PqTrainSet xk, PqTrainSet xv);

/// RoPE augmentation of key calibration rows: out [(1 + copies) n][D] holds the n rows of x, then
/// `copies` passes over them with every RoPE pair i of a row rotated by δ * inv_freq[i], one δ per
/// row and pass drawn uniformly from [0, span) (a shift to a later position, as RoPE would apply it).
void rope_augment(const float* x, std::int64_t n, int D, RopePairs pairs, std::span<const float> inv_freq,
                  int copies, double span, std::uint64_t seed, std::vector<float>& out);

/// Relative reconstruction error of a layer's quantizers on their training rows, in the original
/// space: Σ_h ||x - decode(encode(x))||² / Σ_h ||x||² (0 for all-zero data).
double pq_relative_error(std::span<const ProductQuantizer> pqs, std::span<const float* const> xs, std::int64_t n);

/// bits=: m of every KV head's keys and values in one layer.
struct PqLayerChoice {
    std::vector<int> Mk, Mv;                ///< [n_kv_head]
    std::vector<double> err_k, err_v;       ///< [n_kv_head] pq_relative_error of the chosen m's proxy
    std::size_t bytes = 0;                  ///< code bytes per token over the layer's heads, keys and values
    PqLayerVersion version;                 ///< the trained quantizers of the choice (version 0)
};

/// Choose m from proxies, then train the choice. Every candidate m (pq_m_candidates; one batched
/// call per m over every head, keys and values) is trained briefly (3 k-means iterations, plain
/// k-means++ seeds) on the even rows of the version's own rows (keys without their RoPE-rotated
/// copies) and scored by pq_relative_error on those rows, or on the odd rows, which it did not
/// train on, where the even ones are fewer than 2 per centroid (8-bit codebooks). Allocation is greedy:
/// every stream (a KV head's keys or values) starts at the smallest m; while an upgrade fits
/// `share` code bytes per token, take the one with the largest weighted error reduction per byte
/// (weights 1 for keys, p.v_weight for values). The chosen quantizers are then trained as
/// train_pq_layer_version trains any version (every row, p's k-means options). err_k / err_v are
/// the proxies' errors.
PqLayerChoice choose_pq_layer(const PqKvParams& p, const KvShape& shape, std::size_t share, PqTrainSet xk,
                              PqTrainSet xv);

}  // namespace aqpim::kv
