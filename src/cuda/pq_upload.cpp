// ProductQuantizer -> the CUDA kernels' codebook form; codes into a HostPqProblem's pages.

#include "cuda/pq_upload.h"

#include <algorithm>
#include <numeric>

#include "aqpim/error.h"
#include "cuda/pq_tile.h"

namespace aqpim {

CudaCodebook cuda_codebook(const ProductQuantizer& pq) {
    AQPIM_CHECK(pq.is_trained(), "cuda_codebook: the ProductQuantizer is not trained");
    AQPIM_CHECK(pq.centroids() != nullptr, "cuda_codebook: the ProductQuantizer holds no centroids");
    AQPIM_CHECK(pq.nbits() == 4, "the CUDA kernels read 4-bit codes, got nbits={}", pq.nbits());
    AQPIM_CHECK(pq.rotation_matrix().empty() && pq.hadamard_signs().empty(),
                "the CUDA kernels support quantizers without rotation (rotation=none)");
    AQPIM_CHECK(pq.M() <= 64, "the CUDA kernels support M <= 64, got M={}", pq.M());
    AQPIM_CHECK(pq.D() == 64 || pq.D() == 128, "the CUDA kernels support head_dim 64 or 128, got D={}", pq.D());
    const int D = pq.D();
    CudaCodebook cb;
    cb.M = pq.M();
    cb.centroids.assign(pq.centroids(), pq.centroids() + std::size_t(16) * D);
    cb.perm = pq.permutation();
    if (cb.perm.empty()) {
        cb.perm.resize(D);
        std::iota(cb.perm.begin(), cb.perm.end(), 0);
    }
    cb.gain = pq.scale();
    if (cb.gain.empty()) cb.gain.assign(D, 1.0f);
    return cb;
}

namespace cuda {

void set_codebook(HostPqProblem& p, int b, int version, int kv, bool values, const CudaCodebook& cb) {
    const int D = p.dims.shape.D, M = values ? p.dims.Mv : p.dims.Mk;
    AQPIM_CHECK(cb.M == M, "codebook has M={}, the problem's {} use M={}", cb.M, values ? "values" : "keys", M);
    const std::int64_t slot = codebook_slot(p.dims, b, version, kv);
    std::copy(cb.centroids.begin(), cb.centroids.end(), (values ? p.v_cb : p.k_cb).begin() + slot * 16 * D);
    std::copy(cb.perm.begin(), cb.perm.end(), (values ? p.v_perm : p.k_perm).begin() + slot * D);
    std::copy(cb.gain.begin(), cb.gain.end(), (values ? p.v_gain : p.k_gain).begin() + slot * D);
}

}  // namespace cuda
}  // namespace aqpim
