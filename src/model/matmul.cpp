// Prefill product Y = X W^T. Small batches run the decode kernel once per activation (W is read
// n times, from the LLC after the first pass when it fits). Larger ones dequantize W: with
// AVX-512, 32 rows at a time packed k-major into a panel that an own register-blocked f32 kernel
// multiplies by every activation (6 x 32 outputs per step); otherwise tiles of rows handed to
// OpenBLAS sgemm, one tile per call, the tiles split across our OpenMP threads with OpenBLAS
// itself single-threaded (two thread pools on the same cores would oversubscribe them). The own
// kernel is the default because the OpenBLAS 0.3.21 build here does not recognise this CPU
// (model 207) and falls back to its SSE3 "Prescott" kernels: 18-23 GFLOP/s against 83-128 for
// the own kernel; forced to its SkylakeX kernels (OPENBLAS_CORETYPE) it reaches about the own
// kernel's speed at n = 256 and less at n = 64. See docs/weights.md.

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/threads.h"
#include "aqpim/weights.h"
#include "model/quant_blocks.h"
#include "core/int_math.h"

namespace aqpim {

std::string gemm_backend() {
    return std::string("OpenBLAS ") + openblas_get_corename() + " " + openblas_get_config();
}

namespace quant {

namespace {

/// f32 bytes of one dequantized tile handed to sgemm: sgemm packs all of X for every call, so
/// tiles must be large (measured with OpenBLAS's SkylakeX kernels at n = 64 / 256, W 4096 x 4096:
/// 512 KB tiles 52 / 95 GFLOP/s for f32 W, 4 MB tiles 97 / 112, 16 MB tiles 81 / 102).
constexpr std::size_t kTileBytes = std::size_t(4) << 20;

std::int64_t tile_rows(std::int64_t cols) {
    const std::int64_t r = std::int64_t(kTileBytes / (4 * std::size_t(std::max<std::int64_t>(cols, 1))));
    return std::max<std::int64_t>(16, r / 16 * 16);
}

/// Threads worth using for n x rows x cols multiply-adds: one below about 4 M (waking a second
/// thread costs tens of microseconds, far more on a loaded machine), else up to `n_threads`.
int gemm_threads(const WeightMatrix& W, std::int64_t n, std::int64_t n_parts, int n_threads) {
    const double work = double(n) * double(W.rows) * double(W.cols);
    if (work < double(1 << 22)) return 1;
    return int(std::min<std::int64_t>(n_threads > 0 ? n_threads : default_threads(), n_parts));
}

void single_threaded_blas() {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
}

/// Weight bytes of one tile of rows in matmul_rows: small enough to stay in L1/L2 while every
/// activation of the batch passes over it (32 KB: 32 f16 rows of 512 columns, 4 of 4096).
constexpr std::size_t kRowTileBytes = std::size_t(32) << 10;
/// Rows per tile of dot_rows_batch: the kernel passes a 1024-value chunk of every row of the tile
/// (128 KB of f16 at 64 rows, from L2) per block of 3 activations (12 KB of x, from L1).
constexpr std::int64_t kBatchTileRows = 64;

/// A row-batch kernel over activations of type Act (f32 rows, or QuantizedX prepared by prepare_x).
template <class Act>
using RowBatchKernel = void (*)(GgmlType, const std::uint8_t*, std::size_t, std::int64_t, std::int64_t, const Act*,
                                std::int64_t, float*, std::int64_t, float*);

/// Every activation against tiles of `tile_rows` rows of W through a row-batch kernel
/// (dot_rows_batch, dot_rows_invariant or dot_rows_batch_quantized), the tiles split across
/// `threads`: a split that changes no output's arithmetic. `saved_floats`: the kernel's
/// accumulators between chunks for one tile.
template <class Act>
void matmul_row_tiles(const WeightMatrix& W, const Act* X, std::int64_t n, float* Y, int threads,
                      ThreadWorkspaces& ws, RowBatchKernel<Act> kernel, std::int64_t tile_rows, std::size_t saved_floats) {
    const std::int64_t n_tiles = ceil_div(W.rows, tile_rows);
    ws.prepare(threads);
    parallel_for(
        n_tiles,
        [&](std::int64_t t) {
            const std::int64_t r0 = t * tile_rows, nr = std::min(tile_rows, W.rows - r0);
            float* saved = nullptr;  // read only by rows longer than one chunk
            if (W.cols > kBatchChunk) {
                AlignedBuffer<float>& b = ws.mine().get<MatmulScratch>().saved;
                if (b.size() < saved_floats) b.resize(saved_floats);
                saved = b.data();
            }
            kernel(W.type, W.row(r0), W.row_bytes(), nr, W.cols, X, n, Y + r0, W.rows, saved);
        },
        threads);
}

/// Every activation row through the decode kernel, exactly as matvec computes it (same kernel,
/// same x preparation, so a row's result does not depend on the batch), with the loops tiled: a
/// tile of W rows is read from memory once and reused from cache by every activation, instead of
/// the whole of W streamed once per activation. Threads split W's rows (a split that changes no
/// row's arithmetic) once the whole product is worth them.
void matmul_rows(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads,
                 ThreadWorkspaces& ws) {
    ws.prepare(1);  // the calling thread's: the activations are prepared before the region
    MatmulScratch& caller = ws.mine().get<MatmulScratch>();
    if (n == 1) {
        if (quantizes_x(W.type)) quant_kernels(active_simd_level()).prepare_x(W.type, X, W.cols, caller.qx);
        matvec_prepared(W, X, caller.qx, Y, matvec_threads(W, n_threads));
        return;
    }
    const QuantKernels& k = quant_kernels(active_simd_level());
    std::vector<QuantizedX>& qxs = caller.qxs;
    const bool prepared = quantizes_x(W.type);
    const std::size_t rb = W.row_bytes();
    if (!prepared && k.dot_rows_batch != nullptr)  // every activation against a tile of rows at once
        return matmul_row_tiles(W, X, n, Y, gemm_threads(W, n, ceil_div(W.rows, kBatchTileRows), n_threads), ws,
                                k.dot_rows_batch, kBatchTileRows, batch_saved_floats<BatchBlocks>(kBatchTileRows));
    const std::int64_t tile = std::max<std::int64_t>(1, std::int64_t(kRowTileBytes / std::max<std::size_t>(rb, 1)));
    const std::int64_t n_tiles = ceil_div(W.rows, tile);
    if (prepared) {
        if (qxs.size() < std::size_t(n)) qxs.resize(std::size_t(n));
        for (std::int64_t i = 0; i < n; ++i) k.prepare_x(W.type, X + i * W.cols, W.cols, qxs[std::size_t(i)]);
        if (k.batches_quantized(W.type))
            return matmul_row_tiles(W, qxs.data(), n, Y, gemm_threads(W, n, ceil_div(W.rows, kBatchTileRows), n_threads),
                                    ws, k.dot_rows_batch_quantized, kBatchTileRows,
                                    batch_saved_floats<QuantBatchBlocks>(kBatchTileRows));
    }
    static const QuantizedX unused;
    parallel_for(
        n_tiles,
        [&](std::int64_t t) {
            const std::int64_t r0 = t * tile, nr = std::min(tile, W.rows - r0);
            for (std::int64_t i = 0; i < n; ++i)
                k.dot_rows(W.type, W.row(r0), rb, nr, W.cols, X + i * W.cols, prepared ? qxs[std::size_t(i)] : unused,
                           Y + i * W.rows + r0);
        },
        gemm_threads(W, n, n_tiles, n_threads));
}

/// MatmulPath::invariant: dot_rows_invariant for every n, 1 included, where the level has it for
/// W's type (threads by W's bytes as matvec's when n is small, so a lone decode row is as fast as
/// matvec's), else matmul_rows (matvec's arithmetic for every row).
void matmul_invariant(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads,
                      ThreadWorkspaces& ws) {
    const QuantKernels& k = quant_kernels(active_simd_level());
    if (quantizes_x(W.type) || k.dot_rows_invariant == nullptr) return matmul_rows(W, X, n, Y, n_threads, ws);
    const std::int64_t n_tiles = ceil_div(W.rows, kBatchTileRows);
    const int threads = std::max(gemm_threads(W, n, n_tiles, n_threads),
                                 int(std::min<std::int64_t>(n_tiles, matvec_threads(W, n_threads))));
    // Up to one block of activations (the level's) reads each row once, so tiles need not fit a
    // cache: four a thread, as matvec splits its rows (64-row tasks of a lone row cost more to hand
    // out than to do). More activations pass over a tile again: it must stay in cache (AVX2's blocks
    // of 2 took the large tiles at 4 activations and ran 4096 x 4096 f16 at 50-56 GFLOP/s against
    // 83-87 at 8).
    const std::int64_t tile_rows =
        n <= k.invariant_block_activations
            ? std::max(kBatchTileRows, ceil_div(ceil_div(W.rows, 4 * std::int64_t(threads)), InvariantBlocks::rows) * InvariantBlocks::rows)
            : kBatchTileRows;
    matmul_row_tiles(W, X, n, Y, threads, ws, k.dot_rows_invariant, tile_rows, batch_saved_floats<InvariantBlocks>(tile_rows));
}

void matmul_sgemm(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads,
                  ThreadWorkspaces& ws) {
    single_threaded_blas();
    const std::int64_t tr = tile_rows(W.cols);
    const std::int64_t n_tiles = ceil_div(W.rows, tr);
    const int nt = gemm_threads(W, n, n_tiles, n_threads);
    ws.prepare(nt);
    parallel_for(
        n_tiles,
        [&](std::int64_t t) {
            const std::int64_t r0 = t * tr, r1 = std::min(W.rows, r0 + tr);
            const float* tile = nullptr;
            AlignedBuffer<float>& buf = ws.mine().get<MatmulScratch>().tile;
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

/// Most panels a task of the own path multiplies in order (the next one's rows are requested while
/// one multiplies; parallel_for's chunks of single panels left half of those requests to the other
/// thread's next panel on 32-panel matrices). Fewer where that leaves under two runs a thread.
constexpr std::int64_t kMaxPanelsPerRun = 4;

/// The own-kernel path (AVX-512): threads take runs of 32-row panels, dequantize
/// a panel's rows, pack them k-major and multiply every activation row by them (f16 rows are
/// packed as they are, into an f16 panel that the kernel widens as it loads: a separate
/// dequantize pass was a third of a batch-8 decode step's weight time on the hd128 synth model,
/// and the f32 transpose that replaced it a third of a batch-32 step's).
void matmul_own(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads, ThreadWorkspaces& ws) {
    const std::int64_t n_panels = ceil_div(W.rows, kPanelRows);
    const int nt = gemm_threads(W, n, n_panels, n_threads);
    ws.prepare(nt);
    const std::int64_t per_run = std::clamp<std::int64_t>(n_panels / (2 * nt), 1, kMaxPanelsPerRun);
    const std::int64_t n_runs = ceil_div(n_panels, per_run);
    const std::size_t need = std::size_t(kPanelRows * W.cols);
    const auto panel_rows = [&](std::int64_t p) { return std::min<std::int64_t>(kPanelRows, W.rows - p * kPanelRows); };
    parallel_for(
        n_runs,
        [&](std::int64_t run) {
            const std::int64_t p0 = run * per_run, p1 = std::min(n_panels, p0 + per_run);
            MatmulScratch& scratch = ws.mine().get<MatmulScratch>();
            for (std::int64_t p = p0; p < p1; ++p) {
                const std::int64_t r0 = p * kPanelRows, nr = panel_rows(p);
                // The run's next panel is requested while this one multiplies.
                const void* next = p + 1 < p1 ? W.row(r0 + kPanelRows) : nullptr;
                const std::size_t next_bytes = p + 1 < p1 ? std::size_t(panel_rows(p + 1)) * W.row_bytes() : 0;
                if (W.type == GgmlType::F16) {
                    AlignedBuffer<f16_t>& half_panel = scratch.half_panel;
                    if (half_panel.size() < need) half_panel.resize(need);
                    pack_panel_f16_avx512(reinterpret_cast<const f16_t*>(W.row(r0)), int(nr), W.cols, half_panel.data());
                    gemm_panel_avx512(X, n, W.cols, half_panel.data(), int(nr), Y + r0, W.rows, next, next_bytes);
                    continue;
                }
                AlignedBuffer<float>& rows = scratch.rows;
                AlignedBuffer<float>& panel = scratch.panel;
                if (rows.size() < need) rows.resize(need);
                if (panel.size() < need) panel.resize(need);
                dequantize(W.type, W.row(r0), rows.data(), nr * W.cols);
                pack_panel_avx512(rows.data(), int(nr), W.cols, panel.data());
                gemm_panel_avx512(X, n, W.cols, panel.data(), int(nr), Y + r0, W.rows, next, next_bytes);
            }
        },
        nt);
}

}  // namespace

void matmul_with(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads, MatmulPath path,
                 ThreadWorkspaces* ws) {
    check_matrix(W, "matmul");
    AQPIM_CHECK(n >= 0, "matmul: negative batch size {}", n);
    if (n == 0 || W.rows == 0) return;
    if (W.cols == 0) {
        std::fill(Y, Y + n * W.rows, 0.0f);
        return;
    }
    if (path == MatmulPath::automatic) path = automatic_path(W.type, n);
    if (path == MatmulPath::own && active_simd_level() != SimdLevel::avx512) path = MatmulPath::sgemm;
    ThreadWorkspaces own;
    ThreadWorkspaces& w = ws ? *ws : own;
    switch (path) {
        case MatmulPath::rows: return matmul_rows(W, X, n, Y, n_threads, w);
        case MatmulPath::invariant: return matmul_invariant(W, X, n, Y, n_threads, w);
        case MatmulPath::own: return matmul_own(W, X, n, Y, n_threads, w);
        default: return matmul_sgemm(W, X, n, Y, n_threads, w);
    }
}

MatmulPath automatic_path(GgmlType type, std::int64_t n) {
    if (n <= 1) return MatmulPath::rows;
    if (!quantizes_x(type) && n <= kInvariantMaxBatch && quant_kernels(active_simd_level()).dot_rows_invariant != nullptr)
        return MatmulPath::invariant;
    return n < gemm_min_batch(type) ? MatmulPath::rows : MatmulPath::own;
}

std::int64_t gemm_min_batch(GgmlType type) {
    const SimdLevel level = active_simd_level();
    if (level == SimdLevel::avx2 && quant_kernels(level).batches_quantized(type))
        return type == GgmlType::Q6_K ? kAvx2Q6KRowsBatch : kAvx2QuantRowsBatch;
    switch (type) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16: return 4;
        case GgmlType::Q8_0: return 8;
        default: return 12;
    }
}

}  // namespace quant

void matmul(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads, ThreadWorkspaces* ws) {
    quant::matmul_with(W, X, n, Y, n_threads, quant::MatmulPath::automatic, ws);
}

}  // namespace aqpim
