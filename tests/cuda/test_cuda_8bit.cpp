// The CUDA path for 8-bit codes, on the CPU: the byte layout against aqpim/pq_codes.h, 256-entry
// tables against build_lut (the encode's nearest of 256 centroids: test_cuda_tile.cpp),
// and whole problems through the 8-bit kernel's decomposition (segments, subspace groups,
// histograms, tests/cuda/kernel_emulation_8bit.h) against attend_pq_spans and the
// double-precision reference.

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "cuda/engine_problem.h"
#include "cuda/kernel_emulation.h"
#include "cuda/kernel_emulation_8bit.h"
#include "cuda/pq_tile_8bit.h"

namespace aqpim {
namespace {

using namespace aqpim::cuda;
using namespace aqpim::cuda_test;

TEST(CudaTile8, CodesReadAndWrittenInTheCpuByteLayout) {
    for (int M : {8, 16, 32, 64}) {
        const std::int64_t n = 77;
        const auto codes = test::random_codes(std::size_t(n) * M, 256, M);
        std::vector<std::uint8_t> blocks(code_blocks_for(n) * code_block_bytes(M, 8));
        pack_code_blocks(codes.data(), n, M, 8, blocks.data());
        ASSERT_EQ(std::size_t(coded_block_bytes(M, 8)), code_block_bytes(M, 8));
        ASSERT_EQ(std::size_t(coded_block_bytes(M, 4)), code_block_bytes(M, 4));
        for (std::int64_t t = 0; t < n; ++t)
            for (int m = 0; m < M; ++m) {
                const std::uint8_t* block = blocks.data() + (t / 32) * coded_block_bytes(M, 8);
                EXPECT_EQ(block_code(block, 8, int(t % 32), m), codes[t * M + m]) << "M=" << M << " t=" << t;
            }
    }
    // store_codes (the host side of the encode) writes what the CPU engine's code_at reads.
    PqProblemSpec spec = pq_spec(1, 2, 1, 128, 16, 32, 64, 1, {150}, {0}, 1, 3);
    spec.nbits = 8;
    HostPqProblem h = make_random_pq_problem(spec);
    for (int t : {0, 31, 32, 63, 64, 149})
        for (int values = 0; values < 2; ++values) {
            const int M = values ? 32 : 16;
            const auto c = test::random_codes(M, 256, std::uint64_t(t * 2 + values));
            store_codes(h, 0, 1, values, t, c.data());
            const std::uint8_t* stream =
                h.pool.data() + h.page_offset[t / 64] + (values ? h.v_stream_off : h.k_stream_off)[1];
            for (int m = 0; m < M; ++m) EXPECT_EQ(code_at(stream, t % 64, M, 8, m), c[m]) << "t=" << t << " m=" << m;
        }
}

TEST(CudaTile8, TablesOf256MatchBuildLut) {
    const int D = 128, M = 16, n_q = 2;
    const ProductQuantizer pq = trained_pq(D, M, true, 3, Rotation::none, 8);
    const CudaCodebook cb = cuda_codebook(pq);
    const PqCodebookView view = view_of(cb, D);
    const auto q = test::gaussian(std::size_t(n_q) * D, 4);
    std::vector<float> qy(q.size()), lut(std::size_t(n_q) * M * 256);
    pq.transform_query(q.data(), qy.data(), n_q);
    pq_kernels(SimdLevel::ref).build_lut(qy.data(), n_q, M, 256, D / M, pq.centroids(), lut.data(), nullptr);
    for (int h = 0; h < n_q; ++h) {
        std::vector<float> qyh(D);
        for (int i = 0; i < D; ++i) qyh[i] = query_in_quantizer_space(q.data() + h * D, view, 1.0f, i);
        for (int m = 0; m < M; ++m)
            for (int c = 0; c < 256; ++c) {
                const float want = lut[(std::size_t(h) * M + m) * 256 + c];
                EXPECT_NEAR(lut_entry(qyh.data(), view.cb, D / M, m, c, 256), want, 1e-4f * (1.0f + std::abs(want)));
            }
    }
}

TEST(CudaTile8, KernelDecompositionMatchesTheCpuEngine) {
    struct Case {
        int batch, n_kv_heads, n_q, D, Mk, Mv, page, versions;
        std::vector<int> n_coded;
        int n_f16, chunk_pages;
        Rotation rot;
    };
    const Case cases[] = {
        {2, 2, 4, 128, 32, 32, 64, 2, {300, 451}, 20, 2, Rotation::none},   // partial last page and block
        {1, 1, 3, 64, 16, 8, 32, 3, {2000}, 5, 40, Rotation::none},         // two segments per chunk, versions inside
        {1, 2, 8, 128, 16, 32, 128, 1, {1500}, 0, 12, Rotation::none},      // GQA 8: segments of 1024, groups of 4
        {1, 1, 1, 128, 64, 16, 256, 2, {5000}, 3, 20, Rotation::none},      // GQA 1: segments of 4096, M = 64
        {1, 2, 4, 128, 32, 16, 64, 2, {700}, 9, 4, Rotation::hadamard},     // rotated keys and values
    };
    for (const Case& c : cases) {
        const EngineProblem e = engine_problem(c.batch, c.n_kv_heads, c.n_q, c.D, c.Mk, c.Mv, c.page, c.versions, c.n_coded,
                                               c.n_f16, c.rot, 8, c.chunk_pages);
        const std::vector<float> cpu = cpu_engine_attention(e);
        const std::vector<double> ref = reference_attention(e.h);
        const std::vector<float> emu = emulation::pq_attention(e.h, c.D == 128 ? 8 : 16, emulation::pq8_chunk);
        EXPECT_LT(max_relative_error(cpu.data(), ref.data(), ref.size()), 2e-5) << "n_q=" << c.n_q << " M=" << c.Mk;
        EXPECT_LT(max_relative_error(emu.data(), ref.data(), ref.size()), 2e-5) << "n_q=" << c.n_q << " M=" << c.Mk;
    }
}

TEST(CudaTile8, KernelDecompositionOnRandomProblems) {
    // Random 256-centroid codebooks, gains, permutations and rotations: many chunks and segments,
    // versions changing inside chunks, sequences of different lengths, pages not a multiple of
    // a segment.
    // Then codes from {0, 1, 2} only (every bin shared by many tokens).
    for (const auto& [rotated, code_values] : {std::pair{false, 0}, std::pair{true, 0}, std::pair{false, 3}}) {
        PqProblemSpec spec = pq_spec(3, 2, 5, 128, 32, 16, 96, 4, {3000, 37, 1300}, {64, 4, 17}, 13, 1);
        spec.nbits = 8;
        spec.rotated = rotated;
        spec.code_values = code_values;
        const HostPqProblem h = make_random_pq_problem(spec);
        const std::vector<double> ref = reference_attention(h);
        const std::vector<float> emu = emulation::pq_attention(h, 8, emulation::pq8_chunk);
        EXPECT_LT(max_relative_error(emu.data(), ref.data(), ref.size()), 2e-5) << "rotated " << rotated << " codes < "
                                                                                << code_values;
    }
}

TEST(CudaTile8, RejectsWhatTheKernelCannotRead) {
    PqProblemSpec spec = pq_spec(1, 1, 1, 128, 32, 32, 32, 1, {32}, {0}, 1, 1);
    spec.nbits = 8;
    const HostPqProblem h = make_random_pq_problem(spec);
    PqAttentionParams p = h.view();
    p.part_ml = p.part_acc = p.out = reinterpret_cast<float*>(8);  // present; never read by the check
    EXPECT_NO_THROW(check_pq_attention_params(p));
    p.Mv = 4;  // D / M = 32 > 16
    EXPECT_THROW(check_pq_attention_params(p), std::runtime_error);
    p.Mv = 32;
    p.nbits = 6;
    EXPECT_THROW(check_pq_attention_params(p), std::runtime_error);
    spec.nbits = 2;
    EXPECT_THROW(make_random_pq_problem(spec), std::runtime_error);
    // A codebook of the other width is refused, not copied short.
    HostPqProblem h8 = h;
    EXPECT_THROW(set_codebook(h8, 0, 0, 0, false, cuda_codebook(trained_pq(128, 32, true, 1))), Error);
}

}  // namespace
}  // namespace aqpim
