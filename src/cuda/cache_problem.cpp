// A CUDA attention problem read from the CPU's PQ KV cache (see cache_problem.h).

#include "cuda/cache_problem.h"

#include <algorithm>
#include <numeric>

#include "aqpim/cuda_pq.h"
#include "aqpim/error.h"
#include "cuda/pq_upload.h"

namespace aqpim::cuda {

HostPqProblem cuda_problem_from_cache(const std::vector<PqLayerReadView>& views, int n_q, const float* q, float scale,
                                      int chunk_pages) {
    AQPIM_CHECK(!views.empty(), "cuda_problem_from_cache: no sequence");
    AQPIM_CHECK(chunk_pages >= 1, "cuda_problem_from_cache: chunk_pages={}: expected >= 1", chunk_pages);
    const PqLayerReadView& v0 = views[0];
    AQPIM_CHECK(!v0.k.empty(), "cuda_problem_from_cache: sequence 0 has no trained codebooks yet");
    const int batch = int(views.size()), n_kv_heads = int(v0.k_off.size()), D = v0.head_dim;
    const int Mk = v0.k[0][0].M(), Mv = v0.v[0][0].M();
    HostPqProblem h;
    PqAttentionParams& d = h.dims;
    d.shape = {batch, n_kv_heads, n_q, D, scale};
    check_attention_shape(d.shape);
    d.Mk = Mk;
    d.Mv = Mv;
    d.nbits = v0.nbits;
    d.page_tokens = v0.page_tokens;
    d.chunk_pages = chunk_pages;
    h.page_bytes = v0.page_bytes;
    h.k_stream_off.assign(v0.k_off.begin(), v0.k_off.end());
    h.v_stream_off.assign(v0.v_off.begin(), v0.v_off.end());
    for (int b = 0; b < batch; ++b) {
        const PqLayerReadView& v = views[std::size_t(b)];
        AQPIM_CHECK(v.nbits == v0.nbits && v.page_tokens == v0.page_tokens && v.head_dim == D,
                    "cuda_problem_from_cache: sequence {} has another code width, page or head_dim than sequence 0", b);
        AQPIM_CHECK(v.n_coded == 0 || (v.page_bytes == v0.page_bytes && v.k_off == v0.k_off && v.v_off == v0.v_off),
                    "cuda_problem_from_cache: sequence {} places its heads' codes in its pages otherwise than sequence 0", b);
        for (const auto* streams : {&v.k, &v.v})
            for (const std::vector<ProductQuantizer>& version : *streams)
                for (const ProductQuantizer& pq : version)
                    AQPIM_CHECK(pq.M() == (streams == &v.k ? Mk : Mv) && pq.nbits() == v0.nbits,
                                "cuda_problem_from_cache: sequence {} has a quantizer of M={} nbits={}; one launch "
                                "reads Mk={} Mv={} nbits={} (bits= chooses m per head)",
                                b, pq.M(), pq.nbits(), Mk, Mv, v0.nbits);
        d.max_pages = std::max(d.max_pages, int(v.pages.size()));
        d.n_versions = std::max(d.n_versions, int(v.k.size()));
        d.max_f16 = std::max(d.max_f16, int(v.n_f16));
        h.n_coded.push_back(int(v.n_coded));
        h.n_f16.push_back(int(v.n_f16));
    }
    d.max_pages = std::max(d.max_pages, 1);
    d.n_chunks = (d.max_pages + chunk_pages - 1) / chunk_pages;

    // Pages in order into one pool; the page tables point at them.
    h.page_offset.assign(std::size_t(batch) * d.max_pages, 0);
    h.page_version.assign(std::size_t(batch) * d.max_pages, 0);
    for (int b = 0; b < batch; ++b) {
        const PqLayerReadView& v = views[std::size_t(b)];
        for (std::size_t k = 0; k < v.pages.size(); ++k) {
            h.page_offset[std::size_t(b) * d.max_pages + k] = std::int64_t(h.pool.size());
            h.page_version[std::size_t(b) * d.max_pages + k] = std::uint8_t(v.page_version[k]);
            h.pool.insert(h.pool.end(), v.pages[k], v.pages[k] + v.page_bytes);
        }
    }
    h.q.assign(q, q + std::size_t(batch) * n_kv_heads * n_q * D);
    const std::size_t rows = std::size_t(d.max_f16) * D;
    h.k16.assign(std::size_t(batch) * n_kv_heads * rows, 0);
    h.v16.assign(h.k16.size(), 0);
    for (int b = 0; b < batch; ++b)
        for (int kv = 0; kv < n_kv_heads; ++kv) {
            const PqLayerReadView& v = views[std::size_t(b)];
            std::copy(v.f16_k[kv].begin(), v.f16_k[kv].end(), h.k16.begin() + (std::size_t(b) * n_kv_heads + kv) * rows);
            std::copy(v.f16_v[kv].begin(), v.f16_v[kv].end(), h.v16.begin() + (std::size_t(b) * n_kv_heads + kv) * rows);
        }
    // Codebook slots [batch][n_versions][n_kv_heads]; slots a sequence has no version for stay unread.
    const std::size_t n_slots = std::size_t(batch) * d.n_versions * n_kv_heads;
    for (auto* cb : {&h.k_cb, &h.v_cb}) cb->assign(n_slots * ksub_of(d.nbits) * D, 0.0f);
    for (auto* g : {&h.k_gain, &h.v_gain}) g->assign(n_slots * D, 1.0f);
    for (auto* perm : {&h.k_perm, &h.v_perm}) {
        perm->resize(n_slots * D);
        for (std::size_t s = 0; s < n_slots; ++s) std::iota(perm->begin() + s * D, perm->begin() + (s + 1) * D, 0);
    }
    for (int b = 0; b < batch; ++b) {
        const PqLayerReadView& v = views[std::size_t(b)];
        for (std::size_t j = 0; j < v.k.size(); ++j)
            for (int kv = 0; kv < n_kv_heads; ++kv) {
                set_codebook(h, b, int(j), kv, false, cuda_codebook(v.k[j][kv]));
                set_codebook(h, b, int(j), kv, true, cuda_codebook(v.v[j][kv]));
            }
    }
    return h;
}

}  // namespace aqpim::cuda
