#pragma once
// Problems the CPU engine can answer, for the CUDA kernels' CPU tests: quantizers trained by
// ProductQuantizer (4- or 8-bit, optionally rotated) as the kernels' codebooks, codes from its
// encode in shuffled pages, and the answer of attend_pq_spans + attend_dense_f16.

#include <cstdint>
#include <vector>

#include "aqpim/attention.h"
#include "aqpim/cuda_pq.h"
#include "aqpim/pq.h"
#include "cuda/host_problem.h"
#include "cuda/pq_upload.h"
#include "support/random.h"

namespace aqpim::cuda_test {

using namespace aqpim::cuda;

/// A CudaCodebook as the kernels' view of one codebook slot.
inline PqCodebookView view_of(const CudaCodebook& cb, int D) {
    return {cb.centroids.data(), cb.perm.data(), cb.gain.data(), cb.rotation.empty() ? nullptr : cb.rotation.data(),
            D,                   ksub_of(cb.nbits)};
}

inline ProductQuantizer trained_pq(int D, int M, bool scale, std::uint64_t seed, Rotation rotation = Rotation::none,
                                   int nbits = 4) {
    PQParams p;
    p.D = D;
    p.M = M;
    p.nbits = nbits;
    p.order = SubspaceOrder::variance_balanced;
    p.scale_folding = scale;
    p.rotation = rotation;
    p.seed = seed;
    p.kmeans.max_iter = 6;
    ProductQuantizer pq(p);
    auto x = test::gaussian(std::size_t(512) * D, seed);
    for (int i = 0; i < 512; ++i)  // uneven channel scales, so scale folding and the plan matter
        for (int d = 0; d < D; ++d) x[std::size_t(i) * D + d] *= 0.25f + float(d % 7);
    pq.train(x.data(), 512);
    return pq;
}

/// A problem the CPU engine can answer: trained quantizers per (sequence, version, KV head),
/// codes from ProductQuantizer::encode, written into shuffled pages.
struct EngineProblem {
    HostPqProblem h;
    std::vector<ProductQuantizer> pk, pv;  ///< [batch][versions][n_kv_heads]
};

inline EngineProblem engine_problem(int batch, int n_kv_heads, int n_q, int D, int Mk, int Mv, int page, int versions,
                                    std::vector<int> n_coded, int n_f16, Rotation rotation = Rotation::none,
                                    int nbits = 4, int chunk_pages = 2) {
    PqProblemSpec spec = pq_spec(batch, n_kv_heads, n_q, D, Mk, Mv, page, versions, n_coded, {n_f16}, chunk_pages, 11);
    spec.nbits = nbits;
    EngineProblem e{make_random_pq_problem(spec), {}, {}};
    std::uint64_t seed = 100;
    for (int b = 0; b < batch; ++b)
        for (int v = 0; v < versions; ++v)
            for (int kv = 0; kv < n_kv_heads; ++kv) {
                e.pk.push_back(trained_pq(D, Mk, true, seed++, rotation, nbits));
                e.pv.push_back(trained_pq(D, Mv, false, seed++, rotation, nbits));
                set_codebook(e.h, b, v, kv, false, cuda_codebook(e.pk.back()));
                set_codebook(e.h, b, v, kv, true, cuda_codebook(e.pv.back()));
            }
    const PqAttentionParams p = e.h.dims;
    for (int b = 0; b < batch; ++b)
        for (int kv = 0; kv < n_kv_heads; ++kv)
            for (int t = 0; t < e.h.n_coded[b]; ++t) {
                const int v = e.h.page_version[std::size_t(b) * p.max_pages + t / page];
                const std::size_t slot = (std::size_t(b) * versions + v) * n_kv_heads + kv;
                const auto k = test::gaussian(D, seed++), x = test::gaussian(D, seed++);
                std::vector<std::uint8_t> ck(Mk), cv(Mv);
                e.pk[slot].encode(k.data(), 1, ck.data());
                e.pv[slot].encode(x.data(), 1, cv.data());
                store_codes(e.h, b, kv, false, t, ck.data());
                store_codes(e.h, b, kv, true, t, cv.data());
            }
    return e;
}

/// attend_pq_spans per codebook version over the version's pages, then the f16 rows.
inline std::vector<float> cpu_engine_attention(const EngineProblem& e) {
    const PqAttentionParams p = e.h.view();
    const int D = p.shape.D, n_q = p.shape.n_q;
    std::vector<float> out(std::size_t(p.shape.batch) * p.shape.n_kv_heads * n_q * D);
    for (int b = 0; b < p.shape.batch; ++b)
        for (int kv = 0; kv < p.shape.n_kv_heads; ++kv) {
            const float* q = p.q + (std::size_t(b) * p.shape.n_kv_heads + kv) * n_q * D;
            AttentionPartial part(n_q, D);
            const int n_pages = (e.h.n_coded[b] + p.page_tokens - 1) / p.page_tokens;
            for (int v = 0; v < p.n_versions; ++v) {
                std::vector<PqCodeSpan> spans;
                for (int pg = 0; pg < n_pages; ++pg) {
                    const std::size_t pt = std::size_t(b) * p.max_pages + pg;
                    if (p.page_version[pt] != v) continue;
                    const std::uint8_t* page = p.pool + p.page_offset[pt];
                    spans.push_back({page + p.k_stream_off[kv], page + p.v_stream_off[kv],
                                     std::min(p.page_tokens, e.h.n_coded[b] - pg * p.page_tokens)});
                }
                const std::size_t slot = (std::size_t(b) * p.n_versions + v) * p.shape.n_kv_heads + kv;
                if (!spans.empty())
                    attend_pq_spans(q, n_q, e.pk[slot], e.pv[slot], spans, p.shape.scale, {}, part);
            }
            const std::size_t base = (std::size_t(b) * p.shape.n_kv_heads + kv) * p.max_f16 * D;
            attend_dense_f16(q, n_q, D, p.k16 + base, p.v16 + base, e.h.n_f16[b], p.shape.scale, part);
            part.finalize(out.data() + (std::size_t(b) * p.shape.n_kv_heads + kv) * n_q * D);
        }
    return out;
}

}  // namespace aqpim::cuda_test
