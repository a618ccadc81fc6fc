// Encode of one decode step's new keys and values into the paged 4- or 8-bit code pool.
// Grid (n_kv_heads, batch, 2: keys | values), one thread per subspace.

#include "cuda/cuda_check.h"
#include "cuda/pq_attention.h"
#include "cuda/pq_tile.h"

namespace aqpim::cuda {

namespace {

__global__ void pq_encode_kernel(PqAttentionParams p, const float* k_new, const float* v_new, std::uint8_t* pool) {
    const int kv = blockIdx.x, b = blockIdx.y, values = blockIdx.z, m = threadIdx.x, D = p.shape.D;
    const int M = values ? p.Mv : p.Mk;
    const int i = p.n_coded[b] - 1;
    if (m >= M || i < 0) return;
    const std::int64_t pt = std::int64_t(b) * p.max_pages + i / p.page_tokens;
    const std::int64_t cs = codebook_slot(p, b, p.page_version[pt], kv);
    const PqCodebookView cb = codebook_view(p, cs, values);
    const float* x = (values ? v_new : k_new) + (std::int64_t(b) * p.shape.n_kv_heads + kv) * D;
    const int code = nearest_code(x, cb, D / M, m);
    const int in_page = i % p.page_tokens, t = in_page % kBlockTokens;
    std::uint8_t* block = pool + p.page_offset[pt] + (values ? p.v_stream_off : p.k_stream_off)[kv] +
                          std::int64_t(in_page / kBlockTokens) * stream_block_bytes(p, values);
    if (p.nbits == 8) {  // a byte of its own
        block[m * kBlockTokens + t] = std::uint8_t(code);
        return;
    }
    atomicOr(reinterpret_cast<unsigned int*>(block) + code4_dword(t, m), unsigned(code) << code4_shift(t, m));
}

}  // namespace

void launch_pq_encode(const PqAttentionParams& p, const float* k_new, const float* v_new, std::uint8_t* pool,
                      cudaStream_t stream) {
    check_pq_attention_params(p);
    pq_encode_kernel<<<dim3(p.shape.n_kv_heads, p.shape.batch, 2), 64, 0, stream>>>(p, k_new, v_new, pool);
    AQPIM_CUDA_LAUNCHED();
}

}  // namespace aqpim::cuda
