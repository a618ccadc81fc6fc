// Prefill product Y = X W^T: small batches run the decode kernel once per activation; larger
// ones dequantize tiles of W rows to f32 and hand them to OpenBLAS sgemm, one tile per call, the
// tiles split across our OpenMP threads with OpenBLAS itself single-threaded (two thread pools
// on the same cores would oversubscribe them). See docs/weights.md for the measurements.

#include <cblas.h>

#include <algorithm>
#include <mutex>

#include "aqpim/error.h"
#include "aqpim/threads.h"
#include "aqpim/weights.h"
#include "model/quant_blocks.h"

namespace aqpim {

namespace quant {

namespace {

/// f32 bytes of one dequantized tile: big enough that sgemm's packing of X is amortised over
/// many rows, small enough to stay in L2 (2 MB per core here) with the packed panels.
constexpr std::size_t kTileBytes = std::size_t(512) << 10;

std::int64_t tile_rows(std::int64_t cols) {
    const std::int64_t r = std::int64_t(kTileBytes / (4 * std::size_t(std::max<std::int64_t>(cols, 1))));
    return std::max<std::int64_t>(16, r / 16 * 16);
}

void single_threaded_blas() {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
}

void matmul_rows(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads) {
    const int nt = matvec_threads(W, n_threads);
    QuantizedX& qx = scratch_x();
    for (std::int64_t i = 0; i < n; ++i) {
        const float* x = X + i * W.cols;
        if (quantizes_x(W.type)) quant_kernels(active_simd_level()).prepare_x(W.type, x, W.cols, qx);
        matvec_prepared(W, x, qx, Y + i * W.rows, nt);
    }
}

void matmul_sgemm(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads) {
    single_threaded_blas();
    const std::int64_t tr = tile_rows(W.cols);
    const std::int64_t n_tiles = (W.rows + tr - 1) / tr;
    const int nt = int(std::min<std::int64_t>(n_threads > 0 ? n_threads : default_threads(), n_tiles));
    parallel_for(
        n_tiles,
        [&](std::int64_t t) {
            const std::int64_t r0 = t * tr, r1 = std::min(W.rows, r0 + tr);
            const float* tile = nullptr;
            thread_local AlignedBuffer<float> buf;
            if (W.type == GgmlType::F32) {
                tile = reinterpret_cast<const float*>(W.row(r0));
            } else {
                if (buf.size() < std::size_t((r1 - r0) * W.cols)) buf.resize(std::size_t((r1 - r0) * W.cols));
                dequantize(W.type, W.row(r0), buf.data(), (r1 - r0) * W.cols);  // rows are contiguous
                tile = buf.data();
            }
            // Y[:, r0:r1] = X [n x cols] * tile^T [cols x (r1 - r0)]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(n), blasint(r1 - r0), blasint(W.cols), 1.0f, X,
                        blasint(W.cols), tile, blasint(W.cols), 0.0f, Y + r0, blasint(W.rows));
        },
        nt);
}

}  // namespace

void matmul_with(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads, MatmulPath path) {
    check_matrix(W, "matmul");
    AQPIM_CHECK(n >= 0, "matmul: negative batch size {}", n);
    if (n == 0 || W.rows == 0) return;
    if (W.cols == 0) {
        std::fill(Y, Y + n * W.rows, 0.0f);
        return;
    }
    if (path == MatmulPath::automatic) path = n < kSgemmMinBatch ? MatmulPath::rows : MatmulPath::sgemm;
    if (path == MatmulPath::rows)
        matmul_rows(W, X, n, Y, n_threads);
    else
        matmul_sgemm(W, X, n, Y, n_threads);
}

}  // namespace quant

void matmul(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads) {
    quant::matmul_with(W, X, n, Y, n_threads, quant::MatmulPath::automatic);
}

}  // namespace aqpim
