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
    AQPIM_CHECK(pq.nbits() == 4 || pq.nbits() == 8, "the CUDA kernels read 4- or 8-bit codes, got nbits={}", pq.nbits());
    AQPIM_CHECK(pq.nbits() == 4 || pq.D() / pq.M() <= cuda::kMaxDsub8,
                "the CUDA kernels need D / M <= {} at 8 bits, got D={} M={}", cuda::kMaxDsub8, pq.D(), pq.M());
    AQPIM_CHECK(pq.M() <= 64, "the CUDA kernels support M <= 64, got M={}", pq.M());
    AQPIM_CHECK(pq.D() == 64 || pq.D() == 128, "the CUDA kernels support head_dim 64 or 128, got D={}", pq.D());
    const int D = pq.D();
    CudaCodebook cb;
    cb.M = pq.M();
    cb.nbits = pq.nbits();
    cb.centroids.assign(pq.centroids(), pq.centroids() + std::size_t(cuda::ksub_of(cb.nbits)) * D);
    cb.perm = pq.permutation();
    if (cb.perm.empty()) {
        cb.perm.resize(D);
        std::iota(cb.perm.begin(), cb.perm.end(), 0);
    }
    cb.gain = pq.scale();
    if (cb.gain.empty()) cb.gain.assign(D, 1.0f);
    if (!pq.rotation_matrix().empty() || !pq.hadamard_signs().empty()) {
        // forward(e_j)[i] = R[perm[i]][j] / s_j: the quantizer's own transform, column by column.
        std::vector<float> y(std::size_t(D) * D, 0.0f);
        for (int j = 0; j < D; ++j) y[std::size_t(j) * D + j] = 1.0f;
        pq.forward(y.data(), y.data(), D);
        cb.rotation.assign(std::size_t(D) * D, 0.0f);
        for (int j = 0; j < D; ++j)
            for (int i = 0; i < D; ++i)
                cb.rotation[std::size_t(cb.perm[i]) * D + j] = cb.gain[j] * y[std::size_t(j) * D + i];
    }
    return cb;
}

namespace cuda {

void set_codebook(HostPqProblem& p, int b, int version, int kv, bool values, const CudaCodebook& cb) {
    const int D = p.dims.shape.D, M = values ? p.dims.Mv : p.dims.Mk;
    AQPIM_CHECK(cb.M == M, "codebook has M={}, the problem's {} use M={}", cb.M, values ? "values" : "keys", M);
    AQPIM_CHECK(cb.nbits == p.dims.nbits, "codebook has nbits={}, the problem uses nbits={}", cb.nbits, p.dims.nbits);
    const std::int64_t slot = codebook_slot(p.dims, b, version, kv);
    std::copy(cb.centroids.begin(), cb.centroids.end(),
              (values ? p.v_cb : p.k_cb).begin() + slot * ksub_of(cb.nbits) * D);
    std::copy(cb.perm.begin(), cb.perm.end(), (values ? p.v_perm : p.k_perm).begin() + slot * D);
    std::copy(cb.gain.begin(), cb.gain.end(), (values ? p.v_gain : p.k_gain).begin() + slot * D);
    std::vector<float>& rot = values ? p.v_rot : p.k_rot;
    if (cb.rotation.empty() && rot.empty()) return;
    const std::size_t dd = std::size_t(D) * D;
    if (rot.empty()) {  // the first rotated slot: every other slot keeps the identity
        const std::size_t n_slots = (values ? p.v_gain : p.k_gain).size() / D;
        rot.assign(n_slots * dd, 0.0f);
        for (std::size_t s = 0; s < n_slots; ++s)
            for (int i = 0; i < D; ++i) rot[s * dd + std::size_t(i) * D + i] = 1.0f;
    }
    float* dst = rot.data() + slot * dd;
    if (cb.rotation.empty()) {
        std::fill(dst, dst + dd, 0.0f);
        for (int i = 0; i < D; ++i) dst[std::size_t(i) * D + i] = 1.0f;
    } else {
        std::copy(cb.rotation.begin(), cb.rotation.end(), dst);
    }
}

}  // namespace cuda
}  // namespace aqpim
