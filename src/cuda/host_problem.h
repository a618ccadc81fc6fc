#pragma once
// A decode-attention problem in host memory, in the exact layout the CUDA kernels read
// (attention_params.h): queries, a shuffled page pool of 4- or 8-bit code blocks, page tables with
// codebook versions, f16 sinks/window rows and the codebooks. Used by the CPU tests, the device
// tests and the standalone GPU check; reference_attention() is the double-precision
// decode-then-attend answer every CUDA path is compared with.

#include <cstdint>
#include <vector>

#include "cuda/attention_params.h"

namespace aqpim::cuda {

struct PqProblemSpec {
    AttentionShape shape;            ///< scale 0: 1 / sqrt(D)
    int Mk = 32, Mv = 32;
    int nbits = 4;                   ///< code width, 4 or 8
    int page_tokens = 256;
    int n_versions = 1;              ///< versions split the coded pages into equal contiguous runs
    std::vector<int> n_coded;        ///< [batch] coded tokens (one value: every sequence)
    std::vector<int> n_f16;          ///< [batch] f16 rows (one value: every sequence)
    int chunk_pages = 4;
    bool rotated = false;            ///< a random dense rotation for every codebook (keys and values)
    int code_values = 0;             ///< > 0: every code drawn from [0, code_values) (collisions in
                                     ///< the value histograms); 0: from every code
    bool fill_data = true;           ///< false: leave pool and f16 rows empty (filled on the device)
    std::uint64_t seed = 1;
};

/// A spec in one call (scale 1 / sqrt(D)).
PqProblemSpec pq_spec(int batch, int n_kv_heads, int n_q, int D, int Mk, int Mv, int page, int versions,
                      std::vector<int> n_coded, std::vector<int> n_f16, int chunk_pages, std::uint64_t seed);

struct HostPqProblem {
    PqAttentionParams dims;  ///< sizes; pointers null (see view())
    std::size_t page_bytes = 0;
    std::vector<float> q;                      ///< [batch][n_kv_heads * n_q][D]
    std::vector<std::uint8_t> pool;            ///< [n_pages_total][page_bytes]
    std::vector<std::int64_t> page_offset;     ///< [batch][max_pages]
    std::vector<std::uint8_t> page_version;    ///< [batch][max_pages]
    std::vector<std::int64_t> k_stream_off, v_stream_off;  ///< [n_kv_heads]
    std::vector<int> n_coded, n_f16;           ///< [batch]
    std::vector<std::uint16_t> k16, v16;       ///< [batch][n_kv_heads][max_f16][D]
    std::vector<float> k_cb, v_cb;             ///< [batch][n_versions][n_kv_heads][M][ksub][dsub]
    std::vector<std::int32_t> k_perm, v_perm;  ///< [batch][n_versions][n_kv_heads][D]
    std::vector<float> k_gain, v_gain;         ///< [batch][n_versions][n_kv_heads][D]
    std::vector<float> k_rot, v_rot;           ///< [batch][n_versions][n_kv_heads][D][D], empty: no rotation

    /// dims with the host vectors' pointers (for host-side readers; out/partials stay null).
    PqAttentionParams view() const;
    /// Pool bytes of a page's stream: keys (values = false) or values of KV head kv.
    std::size_t stream_bytes(bool values) const;
};

/// Random problem: Gaussian queries, codebooks and f16 rows, random codes, random permutations and
/// gains in [0.5, 2], random dense rotations when spec.rotated, pages placed in the pool in
/// shuffled order.
HostPqProblem make_random_pq_problem(const PqProblemSpec& spec);

/// out [batch][n_kv_heads * n_q][D] in double: every coded token decoded (x = s ∘ (Rᵀ Pᵀ y), y the
/// centroids its codes name; without R x[perm[i]] = gain[perm[i]] * y[i]) and every f16 row, exact
/// softmax.
std::vector<double> reference_attention(const HostPqProblem& p);

/// Code of sub-vector m of x (original space) against codebook (b, version, kv): the CPU side of
/// the encode kernel (nearest_code on the host).
int host_nearest_code(const HostPqProblem& p, int b, int version, int kv, bool values, const float* x, int m);

/// Codes [M] of coded token t of (b, kv) written into its page (other tokens kept).
void store_codes(HostPqProblem& p, int b, int kv, bool values, int t, const std::uint8_t* codes);

/// max_i |a_i - b_i| / max_i |b_i| (a relative error that does not blow up on tiny elements).
double max_relative_error(const float* a, const double* b, std::size_t n);

}  // namespace aqpim::cuda
