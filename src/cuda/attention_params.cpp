// Validation of the CUDA attention launches' parameters (plain C++: also built without nvcc).

#include "cuda/attention_params.h"

#include "cuda/require.h"

namespace aqpim::cuda {

void check_attention_shape(const AttentionShape& s) {
    AQPIM_CUDA_REQUIRE(s.batch >= 1 && s.n_kv_heads >= 1, "batch and n_kv_heads must be >= 1, got " + std::to_string(s.batch) +
                                                        " and " + std::to_string(s.n_kv_heads));
    AQPIM_CUDA_REQUIRE(s.n_q >= 1 && s.n_q <= kMaxGroup, "GQA ratio n_q must be 1..8, got " + std::to_string(s.n_q));
    AQPIM_CUDA_REQUIRE(s.D == 64 || s.D == 128, "the CUDA kernels support head_dim 64 or 128, got " + std::to_string(s.D));
}

void check_pq_attention_params(const PqAttentionParams& p) {
    check_attention_shape(p.shape);
    for (int M : {p.Mk, p.Mv})
        AQPIM_CUDA_REQUIRE(M >= 1 && M <= 64 && p.shape.D % M == 0,
                           "M must divide head_dim and be <= 64, got M=" + std::to_string(M));
    AQPIM_CUDA_REQUIRE(p.nbits == 4 || p.nbits == 8, "nbits must be 4 or 8, got " + std::to_string(p.nbits));
    for (int M : {p.Mk, p.Mv})
        AQPIM_CUDA_REQUIRE(p.nbits == 4 || p.shape.D / M <= kMaxDsub8,
                           "8-bit codebooks need D / M <= " + std::to_string(kMaxDsub8) + ", got D=" +
                               std::to_string(p.shape.D) + " M=" + std::to_string(M));
    AQPIM_CUDA_REQUIRE(p.page_tokens >= 32 && p.page_tokens % 32 == 0,
                       "page_tokens must be a positive multiple of 32, got " + std::to_string(p.page_tokens));
    AQPIM_CUDA_REQUIRE(p.chunk_pages >= 1 && std::int64_t(p.n_chunks) * p.chunk_pages >= p.max_pages,
                       "n_chunks * chunk_pages must cover max_pages");
    AQPIM_CUDA_REQUIRE(p.n_versions >= 1 && p.n_versions <= 256, "n_versions must be 1..256");
    AQPIM_CUDA_REQUIRE(p.q && p.pool && p.page_offset && p.page_version && p.k_stream_off && p.v_stream_off &&
                           p.n_coded && p.n_f16 && p.k_cb && p.k_perm && p.k_gain && p.v_cb && p.v_perm &&
                           p.v_gain && p.part_ml && p.part_acc && p.out,
                       "a buffer of the PQ attention launch is missing");
    AQPIM_CUDA_REQUIRE(p.max_f16 == 0 || (p.k16 && p.v16), "f16 rows declared but k16/v16 missing");
    // A rotated 4-bit value codebook is taken back to the original space through a [D] buffer that
    // overlays the flushed histograms [16][Mv]: D / Mv <= 16 (8-bit: the same bound, above).
    AQPIM_CUDA_REQUIRE(!p.v_rot || p.shape.D / p.Mv <= 16,
                       "rotated value codebooks need D / Mv <= 16, got D=" + std::to_string(p.shape.D) +
                           " Mv=" + std::to_string(p.Mv));
}

}  // namespace aqpim::cuda
