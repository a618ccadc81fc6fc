// Every compiled SIMD level of the LUT kernels against the scalar reference, on odd sizes.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "aqpim/aligned.h"
#include "aqpim/error.h"
#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "aqpim/simd.h"
#include "support/random.h"
#include "support/simd_guard.h"

namespace aqpim {
namespace {

struct Shape {
    int n_q, M, nbits, dsub;
    std::int64_t n_tokens;
};

std::string name(const Shape& s) {
    return "n_q=" + std::to_string(s.n_q) + " M=" + std::to_string(s.M) + " nbits=" + std::to_string(s.nbits) +
           " dsub=" + std::to_string(s.dsub) + " n=" + std::to_string(s.n_tokens);
}

const Shape kShapes[] = {
    {1, 1, 4, 2, 1}, {1, 3, 4, 1, 31}, {4, 32, 4, 4, 100}, {3, 33, 4, 3, 65}, {5, 8, 4, 2, 64},
    {9, 16, 4, 8, 40}, {2, 5, 4, 5, 33}, {4, 16, 8, 8, 70}, {3, 7, 8, 2, 32}, {1, 64, 4, 2, 200},
    // 4-bit over two runs of 32 blocks of the pair-histogram pass, M % 4 == 2, a partial head group
    {5, 18, 4, 2, 1100},
    // 8-bit: partial chunks of 8 subspaces, head groups of 4/8/16 with a partial last one, and
    // more tokens than one run of 32 blocks of the chunked kernels
    {9, 10, 8, 4, 100}, {5, 33, 8, 2, 45}, {8, 32, 8, 4, 1100}, {17, 3, 8, 1, 33}, {2, 1, 8, 3, 1},
    // GQA 8 at dsub 8 and GQA 2 at dsub 4: the packed rows of hist_times_codebook (avx512)
    {8, 8, 8, 8, 40}, {2, 4, 4, 4, 20},
};

struct Data {
    std::vector<std::uint8_t> blocks;
    std::vector<float> lut, p, centroids;
    std::int64_t n_blocks, stride;
};

Data make_data(const Shape& s, std::uint64_t seed) {
    const int ksub = 1 << s.nbits;
    Data d;
    d.n_blocks = code_blocks_for(s.n_tokens);
    d.stride = d.n_blocks * kCodeBlock + 3;  // deliberately not a multiple of the block
    auto codes = test::random_codes(std::size_t(s.n_tokens) * s.M, ksub, seed);
    d.blocks.resize(std::size_t(d.n_blocks) * code_block_bytes(s.M, s.nbits));
    pack_code_blocks(codes.data(), s.n_tokens, s.M, s.nbits, d.blocks.data());
    d.lut = test::gaussian(std::size_t(s.n_q) * s.M * ksub, seed + 1);
    d.p = test::gaussian(std::size_t(s.n_q) * d.stride, seed + 2);
    for (float& x : d.p) x = std::fabs(x);
    d.centroids = test::gaussian(std::size_t(s.M) * ksub * s.dsub, seed + 3);
    return d;
}

TEST(PqCodes, PackUnpackRoundTrip) {
    for (int nbits : {4, 8})
        for (std::int64_t n : {1, 31, 32, 33, 100}) {
            const int M = 7;
            auto codes = test::random_codes(std::size_t(n) * M, 1 << nbits, 5);
            std::vector<std::uint8_t> blocks(code_blocks_for(n) * code_block_bytes(M, nbits)), back(codes.size());
            pack_code_blocks(codes.data(), n, M, nbits, blocks.data());
            unpack_code_blocks(blocks.data(), n, M, nbits, back.data());
            EXPECT_EQ(back, codes) << "nbits=" << nbits << " n=" << n;
        }
}

TEST(PqCodes, FourBitGroupLayout) {
    // M = 6 -> two groups of 4 subspaces (the second half padding), 64 bytes each
    const int M = 6;
    std::vector<std::uint8_t> codes(32 * M);
    for (int t = 0; t < 32; ++t)
        for (int m = 0; m < M; ++m) codes[t * M + m] = std::uint8_t((t * 7 + m * 3) % 16);
    ASSERT_EQ(code_block_bytes(M, 4), 128u);
    std::vector<std::uint8_t> block(128);
    pack_code_blocks(codes.data(), 32, M, 4, block.data());
    for (int g = 0; g < 2; ++g)
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 4; ++j) {
                const int m = 4 * g + j;
                const std::uint8_t expect =
                    m < M ? std::uint8_t(codes[i * M + m] | (codes[(i + 16) * M + m] << 4)) : std::uint8_t(0);
                EXPECT_EQ(block[g * 64 + 4 * i + j], expect) << "g=" << g << " i=" << i << " j=" << j;
            }
}

TEST(PqCodes, EightBitRowLayout) {
    const int M = 3;
    std::vector<std::uint8_t> codes(40 * M);
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = std::uint8_t(i * 13);
    std::vector<std::uint8_t> blocks(2 * code_block_bytes(M, 8));
    pack_code_blocks(codes.data(), 40, M, 8, blocks.data());
    for (int t = 0; t < 40; ++t)
        for (int m = 0; m < M; ++m)
            EXPECT_EQ(blocks[(t / 32) * 96 + m * 32 + t % 32], codes[t * M + m]);
}

TEST(PqKernels, BuildLutMatchesRef) {
    for (const Shape& s : kShapes) {
        const int ksub = 1 << s.nbits, D = s.M * s.dsub;
        auto qy = test::gaussian(std::size_t(s.n_q) * D, 11);
        auto cents = test::gaussian(std::size_t(s.M) * ksub * s.dsub, 12);
        std::vector<float> ref(std::size_t(s.n_q) * s.M * ksub), out(ref.size());
        std::vector<float> columns(lut_columns_floats(s.M, ksub, s.dsub));
        pq_kernels(SimdLevel::ref).build_lut(qy.data(), s.n_q, s.M, ksub, s.dsub, cents.data(), ref.data(), nullptr);
        for (SimdLevel level : supported_simd_levels()) {
            pq_kernels(level).build_lut(qy.data(), s.n_q, s.M, ksub, s.dsub, cents.data(), out.data(), columns.data());
            for (std::size_t i = 0; i < ref.size(); ++i)
                ASSERT_NEAR(out[i], ref[i], 1e-5f * (1 + std::fabs(ref[i]))) << simd_level_name(level) << " " << name(s);
        }
    }
}

TEST(PqKernels, ScanF32MatchesRef) {
    for (const Shape& s : kShapes) {
        Data d = make_data(s, 21);
        std::vector<float> ref(std::size_t(s.n_q) * d.stride, -1.0f), out(ref.size(), -1.0f);
        pq_kernels(SimdLevel::ref).scan_f32(d.lut.data(), s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks, ref.data(), d.stride);
        for (SimdLevel level : supported_simd_levels()) {
            std::fill(out.begin(), out.end(), -1.0f);
            pq_kernels(level).scan_f32(d.lut.data(), s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks, out.data(), d.stride);
            for (int h = 0; h < s.n_q; ++h)
                for (std::int64_t t = 0; t < d.stride; ++t)  // includes the untouched gap after the blocks
                    ASSERT_NEAR(out[h * d.stride + t], ref[h * d.stride + t], 1e-4f)
                        << simd_level_name(level) << " " << name(s) << " h=" << h << " t=" << t;
        }
    }
}

TEST(PqKernels, ScanF32By4MatchesScanF32) {
    for (const Shape& s : kShapes) {
        if (s.nbits != 8) continue;
        Data d = make_data(s, 23);
        AlignedBuffer<float> lut4(std::size_t((s.n_q + 3) / 4) * s.M * 256 * 4);
        interleave_luts_by4(d.lut.data(), s.n_q, s.M, lut4.data());
        std::vector<float> ref(std::size_t(s.n_q) * d.stride, -1.0f), out(ref.size());
        pq_kernels(SimdLevel::ref).scan_f32(d.lut.data(), s.n_q, s.M, 8, d.blocks.data(), d.n_blocks, ref.data(), d.stride);
        for (SimdLevel level : supported_simd_levels()) {
            std::fill(out.begin(), out.end(), -1.0f);
            pq_kernels(level).scan_f32_8bit_by4(lut4.data(), s.n_q, s.M, d.blocks.data(), d.n_blocks, out.data(),
                                                d.stride);
            for (int h = 0; h < s.n_q; ++h)
                for (std::int64_t t = 0; t < d.stride; ++t)  // includes the untouched gap after the blocks
                    ASSERT_NEAR(out[h * d.stride + t], ref[h * d.stride + t], 1e-4f)
                        << simd_level_name(level) << " " << name(s) << " h=" << h << " t=" << t;
        }
    }
}

TEST(PqKernels, InterleaveLutsBy4ZeroesMissingHeads) {
    const int n_q = 5, M = 2;
    std::vector<float> lut(std::size_t(n_q) * M * 256);
    for (std::size_t i = 0; i < lut.size(); ++i) lut[i] = float(i + 1);
    std::vector<float> lut4(std::size_t(2) * M * 256 * 4, -1.0f);
    interleave_luts_by4(lut.data(), n_q, M, lut4.data());
    for (int g = 0; g < 2; ++g)
        for (int m = 0; m < M; ++m)
            for (int c = 0; c < 256; ++c)
                for (int j = 0; j < 4; ++j) {
                    const int h = 4 * g + j;
                    EXPECT_EQ(lut4[((std::size_t(g) * M + m) * 256 + c) * 4 + j],
                              h < n_q ? lut[(std::size_t(h) * M + m) * 256 + c] : 0.0f);
                }
}

// The integer sums are exact; only the final scale * sum + bias may differ by an FMA rounding.
// 4- and 8-bit codes (the avx512 level's VBMI 8-bit kernel, odd block counts included).
TEST(PqKernels, ScanI8MatchesRef) {
    for (const Shape& s : kShapes) {
        const int ksub = 1 << s.nbits;
        Data d = make_data(s, 31);
        std::vector<std::uint8_t> qlut(std::size_t(s.n_q) * s.M * ksub);
        std::vector<Int8LutParams> prm(s.n_q);
        quantize_luts(d.lut.data(), s.n_q, s.M, ksub, qlut.data(), prm.data());
        std::vector<float> ref(std::size_t(s.n_q) * d.stride), out(ref.size());
        pq_kernels(SimdLevel::ref).scan_i8(qlut.data(), prm.data(), s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks,
                                           ref.data(), d.stride);
        for (SimdLevel level : supported_simd_levels()) {
            std::fill(out.begin(), out.end(), -1e30f);
            pq_kernels(level).scan_i8(qlut.data(), prm.data(), s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks,
                                      out.data(), d.stride);
            for (int h = 0; h < s.n_q; ++h) {
                // a few ulps of the magnitudes that are added (bias and scale * sum cancel)
                const float tol = 1e-6f * (std::fabs(prm[h].bias) + prm[h].scale * 255 * s.M);
                for (std::int64_t t = 0; t < d.n_blocks * kCodeBlock; ++t)
                    ASSERT_NEAR(out[h * d.stride + t], ref[h * d.stride + t], tol) << simd_level_name(level) << " " << name(s);
                // nothing past the blocks' tokens is written
                for (std::int64_t t = d.n_blocks * kCodeBlock; t < d.stride; ++t)
                    ASSERT_EQ(out[h * d.stride + t], -1e30f) << simd_level_name(level) << " " << name(s);
            }
        }
    }
}

TEST(PqKernels, ScanI8WithinDocumentedBound) {
    // |int8 score - f32 score| <= M * scale / 2 (rounding of each table entry).
    for (const Shape& s : kShapes) {
        const int ksub = 1 << s.nbits;
        Data d = make_data(s, 41);
        std::vector<std::uint8_t> qlut(std::size_t(s.n_q) * s.M * ksub);
        std::vector<Int8LutParams> prm(s.n_q);
        quantize_luts(d.lut.data(), s.n_q, s.M, ksub, qlut.data(), prm.data());
        std::vector<float> exact(std::size_t(s.n_q) * d.stride), approx(exact.size());
        pq_kernels().scan_f32(d.lut.data(), s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks, exact.data(), d.stride);
        pq_kernels().scan_i8(qlut.data(), prm.data(), s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks, approx.data(),
                             d.stride);
        for (int h = 0; h < s.n_q; ++h) {
            const float bound = s.M * prm[h].scale * 0.5f * 1.0001f + 1e-5f;
            for (std::int64_t t = 0; t < s.n_tokens; ++t)
                ASSERT_LE(std::fabs(exact[h * d.stride + t] - approx[h * d.stride + t]), bound) << name(s);
        }
    }
}

// quantize_luts (SSE4.1; AVX-512 at that level) is its scalar definition bit for bit: per head one
// step for every subspace, entries rounded with nearbyint from the subspace's minimum (over all
// its ksub entries), the minima summed in bias.
TEST(PqKernels, QuantizeLutsIsTheScalarDefinition) {
    for (const SimdLevel level : supported_simd_levels())
    for (const Shape& s : kShapes) {
        const int ksub = 1 << s.nbits;
        test::SimdLevelGuard guard(level);
        Data d = make_data(s, 43);
        for (int c = 0; c < ksub; ++c) d.lut[std::size_t(c)] = 0.25f;  // a flat subspace (range 0)
        std::vector<std::uint8_t> qlut(std::size_t(s.n_q) * s.M * ksub);
        std::vector<Int8LutParams> prm(s.n_q);
        quantize_luts(d.lut.data(), s.n_q, s.M, ksub, qlut.data(), prm.data());
        for (int h = 0; h < s.n_q; ++h) {
            const float* l = d.lut.data() + std::size_t(h) * s.M * ksub;
            float bias = 0, max_range = 0;
            for (int m = 0; m < s.M; ++m) {
                auto [lo, hi] = std::minmax_element(l + m * ksub, l + m * ksub + ksub);
                bias += *lo;
                max_range = std::max(max_range, *hi - *lo);
            }
            const float scale = max_range > 0 ? max_range / 255.0f : 1.0f, inv = 1.0f / scale;
            ASSERT_EQ(prm[h].scale, scale) << simd_level_name(level) << " " << name(s);
            ASSERT_EQ(prm[h].bias, bias) << simd_level_name(level) << " " << name(s);
            for (int m = 0; m < s.M; ++m) {
                const float lo = *std::min_element(l + m * ksub, l + m * ksub + ksub);
                for (int c = 0; c < ksub; ++c) {
                    const float v = std::clamp(std::nearbyint((l[m * ksub + c] - lo) * inv), 0.0f, 255.0f);
                    ASSERT_EQ(qlut[(std::size_t(h) * s.M + m) * ksub + c], std::uint8_t(v)) << name(s) << " m " << m;
                }
            }
        }
    }
}

TEST(PqKernels, QuantizeLutsRejectsOtherTableSizes) {
    std::vector<float> lut(64);
    std::vector<std::uint8_t> qlut(64);
    Int8LutParams prm;
    EXPECT_THROW(quantize_luts(lut.data(), 1, 1, 64, qlut.data(), &prm), Error);
}

TEST(PqKernels, CodebookColumnsTransposeEverySubspace) {
    // 4 x 4 register transposes where dsub allows, a scalar tail for the rest of the dims.
    for (const int dsub : {1, 2, 3, 4, 5, 8, 12, 32}) {
        const int M = 3;
        std::vector<float> cb(std::size_t(M) * 16 * dsub), columns(cb.size(), -1.0f);
        for (std::size_t i = 0; i < cb.size(); ++i) cb[i] = float(i) + 0.5f;
        codebook_columns(cb.data(), M, dsub, columns.data());
        for (int m = 0; m < M; ++m)
            for (int c = 0; c < 16; ++c)
                for (int d = 0; d < dsub; ++d)
                    ASSERT_EQ(columns[(std::size_t(m) * dsub + d) * 16 + c], cb[(std::size_t(m) * 16 + c) * dsub + d])
                        << "dsub " << dsub << " m " << m << " c " << c << " d " << d;
    }
}

TEST(PqKernels, ValuesHistMatchesRef) {
    for (const Shape& s : kShapes) {
        Data d = make_data(s, 51);
        const int ksub = 1 << s.nbits;
        std::vector<float> ref(std::size_t(s.M) * ksub * s.n_q, 0.5f), out(ref.size());
        pq_kernels(SimdLevel::ref).values_hist(d.p.data(), d.stride, s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks, ref.data());
        for (SimdLevel level : supported_simd_levels()) {
            std::fill(out.begin(), out.end(), 0.5f);
            pq_kernels(level).values_hist(d.p.data(), d.stride, s.n_q, s.M, s.nbits, d.blocks.data(), d.n_blocks, out.data());
            for (std::size_t i = 0; i < ref.size(); ++i)
                ASSERT_NEAR(out[i], ref[i], 1e-4f * (1 + std::fabs(ref[i]))) << simd_level_name(level) << " " << name(s);
        }
    }
}

// hist_times_codebook at every level (dsub 2/4/8 take the row template, others the plain loop),
// 4- and 8-bit, head groups of 4 with a partial last one, against its double-precision definition.
TEST(PqKernels, HistTimesCodebookIsItsDefinition) {
    for (const SimdLevel level : supported_simd_levels())
        for (const Shape& s : kShapes) {
            test::SimdLevelGuard guard(level);
            const int ksub = 1 << s.nbits, D = s.M * s.dsub;
            Data d = make_data(s, 67);
            const std::vector<float> hist = test::gaussian(std::size_t(s.M) * ksub * s.n_q, 68);
            std::vector<float> out(std::size_t(s.n_q) * D, 0.25f);
            hist_times_codebook(hist.data(), s.n_q, s.M, ksub, s.dsub, d.centroids.data(), out.data());
            for (int h = 0; h < s.n_q; ++h)
                for (int m = 0; m < s.M; ++m)
                    for (int j = 0; j < s.dsub; ++j) {
                        double want = 0.25, mag = 0.25;
                        for (int c = 0; c < ksub; ++c) {
                            const double t = double(hist[(std::size_t(m) * ksub + c) * s.n_q + h]) *
                                             d.centroids[(std::size_t(m) * ksub + c) * s.dsub + j];
                            want += t;
                            mag += std::fabs(t);
                        }
                        ASSERT_NEAR(out[std::size_t(h) * D + m * s.dsub + j], want, 1e-5 * mag)
                            << simd_level_name(level) << " " << name(s) << " h " << h << " m " << m;
                    }
        }
}

TEST(PqKernels, ValuesPermMatchesHistogramPath) {
    for (const Shape& s : kShapes) {
        if (s.nbits != 4) continue;
        Data d = make_data(s, 61);
        const int D = s.M * s.dsub;
        std::vector<float> hist(std::size_t(s.M) * 16 * s.n_q, 0.0f), expect(std::size_t(s.n_q) * D, 0.25f);
        pq_kernels(SimdLevel::ref).values_hist(d.p.data(), d.stride, s.n_q, s.M, 4, d.blocks.data(), d.n_blocks, hist.data());
        hist_times_codebook(hist.data(), s.n_q, s.M, 16, s.dsub, d.centroids.data(), expect.data());
        std::vector<float> columns(std::size_t(s.M) * s.dsub * 16);
        codebook_columns(d.centroids.data(), s.M, s.dsub, columns.data());
        for (SimdLevel level : supported_simd_levels()) {
            std::vector<float> out(expect.size(), 0.25f);
            pq_kernels(level).values_perm(d.p.data(), d.stride, s.n_q, s.M, s.dsub, d.blocks.data(), d.n_blocks, columns.data(), out.data());
            for (std::size_t i = 0; i < out.size(); ++i)
                ASSERT_NEAR(out[i], expect[i], 1e-3f * (1 + std::fabs(expect[i]))) << simd_level_name(level) << " " << name(s);
        }
    }
}

/// x rounded to bf16 (round to nearest even), as vcvtneps2bf16 does for normal numbers.
float to_bf16(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

// The bf16 value pass is its definition, out += Σ_t bf16(p) * bf16(column), up to f32 summation
// (the products of two bf16 are exact in f32); and within the bf16 bound of the exact pass:
// |Δ| <= 2^-8 Σ_t |p * column| (each factor rounded by at most 2^-9 of itself).
TEST(PqKernels, ValuesBf16IsTheRoundedDefinitionWithinItsBound) {
    if (!cpu_has_avx512_bf16() || !pq_kernels(SimdLevel::avx512).values_bf16)
        GTEST_SKIP() << "this CPU has no AVX512-BF16: the bf16 value pass cannot run here";
    for (const Shape& s : kShapes) {
        if (s.nbits != 4) continue;
        Data d = make_data(s, 67);
        const int D = s.M * s.dsub;
        std::vector<float> columns(std::size_t(s.M) * s.dsub * 16);
        codebook_columns(d.centroids.data(), s.M, s.dsub, columns.data());
        std::vector<float> out(std::size_t(s.n_q) * D, 0.25f);
        pq_kernels(SimdLevel::avx512).values_bf16(d.p.data(), d.stride, s.n_q, s.M, s.dsub, d.blocks.data(), d.n_blocks,
                                                  columns.data(), out.data());
        for (int h = 0; h < s.n_q; ++h)
            for (int m = 0; m < s.M; ++m)
                for (int j = 0; j < s.dsub; ++j) {
                    double rounded = 0.25, exact = 0.25, magnitude = 0;
                    for (std::int64_t t = 0; t < d.n_blocks * kCodeBlock; ++t) {
                        const float p = d.p[std::size_t(h * d.stride + t)];
                        const float c = columns[(std::size_t(m) * s.dsub + j) * 16 + code_at(d.blocks.data(), t, s.M, 4, m)];
                        rounded += double(to_bf16(p)) * to_bf16(c);
                        exact += double(p) * c;
                        magnitude += std::fabs(double(p) * c);
                    }
                    const double got = out[std::size_t(h) * D + m * s.dsub + j];
                    ASSERT_NEAR(got, rounded, 1e-6 * magnitude + 1e-6) << name(s) << " h " << h << " m " << m << " j " << j;
                    ASSERT_LE(std::fabs(got - exact), magnitude / 256 + 1e-6) << name(s) << " h " << h << " m " << m;
                }
    }
}

TEST(PqKernels, ValuesPairsMatchRefAndFoldToTheHistogram) {
    for (const Shape& s : kShapes) {
        if (s.nbits != 4) continue;
        Data d = make_data(s, 71);
        std::vector<float> ref_pairs(pair_hist_floats(s.n_q, s.M), 0.0f);
        pq_kernels(SimdLevel::ref).values_pairs(d.p.data(), d.stride, s.n_q, s.M, d.blocks.data(), d.n_blocks, ref_pairs.data());
        std::vector<float> expect(std::size_t(s.M) * 16 * s.n_q, 0.5f);
        pq_kernels(SimdLevel::ref).values_hist(d.p.data(), d.stride, s.n_q, s.M, 4, d.blocks.data(), d.n_blocks, expect.data());
        for (SimdLevel level : supported_simd_levels()) {
            std::vector<float> pairs(ref_pairs.size(), 0.0f);
            pq_kernels(level).values_pairs(d.p.data(), d.stride, s.n_q, s.M, d.blocks.data(), d.n_blocks, pairs.data());
            for (std::size_t i = 0; i < pairs.size(); ++i)
                ASSERT_NEAR(pairs[i], ref_pairs[i], 1e-4f * (1 + std::fabs(ref_pairs[i])))
                    << simd_level_name(level) << " " << name(s) << " i=" << i;
            std::vector<float> hist(expect.size(), 0.5f);
            pair_hist_marginals(pairs.data(), s.n_q, s.M, hist.data());
            for (std::size_t i = 0; i < hist.size(); ++i)
                ASSERT_NEAR(hist[i], expect[i], 1e-4f * (1 + std::fabs(expect[i]))) << simd_level_name(level) << " " << name(s);
        }
    }
}

}  // namespace
}  // namespace aqpim
