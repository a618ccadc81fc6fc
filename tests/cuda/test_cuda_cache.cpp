// The CUDA kernels read the CPU's PQ KV cache as it is: a decode step of a batch of sequences, read
// from the cache's pages, page tables, codebook versions and f16 rows (pq_layer_read_view ->
// cuda_problem_from_cache), through the kernels' decompositions (4-bit histogram and tensor-core
// paths, the 8-bit kernel) and the double-precision reference, against the cache's own attend().

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/kv_capture.h"
#include "aqpim/kv_pq.h"
#include "aqpim/kv_scheme.h"
#include "cuda/cache_problem.h"
#include "cuda/kernel_emulation.h"
#include "cuda/kernel_emulation_8bit.h"
#include "cuda/mma_emulation.h"

namespace aqpim {
namespace {

using namespace aqpim::cuda;

constexpr int kLayers = 2, kKv = 2, kD = 64, kGroup = 4;

KvShape neox_shape() {
    KvShape s;
    s.n_layer = kLayers;
    s.n_kv_head = kKv;
    s.head_dim = kD;
    s.rope_pairs = RopePairs::neox;
    for (int i = 0; i < kD / 2; ++i) s.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * i / kD)));
    return s;
}

/// Sequences of these lengths appended in two steps to every layer of a cache of `spec`.
struct CacheRun {
    std::unique_ptr<KvCache> cache;
    std::vector<CapturedAttention> data;  ///< per sequence
    std::vector<int> lengths;
};

CacheRun run_cache(const std::string& spec, const std::vector<int>& lengths) {
    CacheRun r{make_pq_kv_cache(parse_kv_scheme(spec), neox_shape()), {}, lengths};
    for (std::size_t b = 0; b < lengths.size(); ++b) {
        const int n = lengths[b];
        r.data.push_back(synthetic_attention(n, kKv * kGroup, kKv, kD, 100 + b));
        r.cache->add_sequence(int(b));
        const std::size_t row = std::size_t(kKv) * kD;
        for (int il = 0; il < kLayers; ++il) {
            const CapturedAttention& d = r.data.back();
            r.cache->append(il, int(b), n / 2, d.k.data(), d.v.data());
            r.cache->append(il, int(b), n - n / 2, d.k.data() + (n / 2) * row, d.v.data() + (n / 2) * row);
        }
    }
    return r;
}

/// Queries of every sequence at its last position [batch][kKv * kGroup][kD].
std::vector<float> last_queries(const CacheRun& r) {
    std::vector<float> q;
    const std::size_t row = std::size_t(kKv) * kGroup * kD;
    for (std::size_t b = 0; b < r.lengths.size(); ++b) {
        const float* at = r.data[b].q.data() + std::size_t(r.lengths[b] - 1) * row;
        q.insert(q.end(), at, at + row);
    }
    return q;
}

/// The cache's own answer for layer il: [batch][kKv * kGroup][kD].
std::vector<float> cache_attention(const CacheRun& r, int il, const std::vector<float>& q, float scale) {
    std::vector<float> out(q.size());
    for (std::size_t b = 0; b < r.lengths.size(); ++b)
        for (int ih = 0; ih < kKv; ++ih) {
            const std::int64_t pos = r.lengths[b] - 1;
            const std::size_t at = (b * kKv + ih) * kGroup * kD;
            const KvQuery query{q.data() + at, std::int64_t(kGroup) * kD, 1, kGroup, &pos, scale, out.data() + at,
                                std::int64_t(kGroup) * kD};
            r.cache->attend(il, int(b), ih, query);
        }
    return out;
}

// The kernels' exact score tables against the cache's: 4-bit cases pin scores=f32 (the cache's
// default, auto, takes int8 tables there).
TEST(CudaCache, KernelsReadThePqCacheAsItIs) {
    const float scale = 1.0f / std::sqrt(float(kD));
    const struct {
        std::string spec;
        std::vector<int> lengths;
        int versions;  ///< codebook versions the first sequence's pages use
    } cases[] = {
        // three versions, pages of 64, one sequence still before its codebooks
        {"pq:m=16,calib=64,refresh=128,versions=3,page=64,sinks=4,window=16,scores=f32", {700, 130, 40}, 3},
        // Hadamard rotation, f16 codebooks, no refresh
        {"pq:m=16,rotation=hadamard,cb=f16,calib=64,refresh=0,page=64,window=32,scores=f32", {500, 200}, 1},
        // 8-bit codes, two versions
        {"pq:m=16,nbits=8,calib=300,refresh=384,versions=2,page=128,window=16,scores=f32", {900, 310}, 2},
    };
    for (const auto& c : cases) {
        const CacheRun r = run_cache(c.spec, c.lengths);
        const std::vector<float> q = last_queries(r);
        for (int il = 0; il < kLayers; ++il) {
            std::vector<PqLayerReadView> views;
            for (std::size_t b = 0; b < c.lengths.size(); ++b) views.push_back(pq_layer_read_view(*r.cache, int(b), il));
            ASSERT_GT(views[0].n_coded, 0) << c.spec;
            ASSERT_GT(views[0].pages.size(), 1u) << c.spec;
            EXPECT_EQ(views[0].page_version.back() + 1, c.versions) << c.spec;
            const HostPqProblem h = cuda_problem_from_cache(views, kGroup, q.data(), scale, 2);
            const std::vector<float> cpu = cache_attention(r, il, q, scale);
            const std::vector<double> ref = reference_attention(h);
            EXPECT_LT(max_relative_error(cpu.data(), ref.data(), ref.size()), 2e-5) << c.spec << " layer " << il;
            if (h.dims.nbits == 8) {
                const std::vector<float> emu = emulation::pq_attention(h, 16, emulation::pq8_chunk);
                EXPECT_LT(max_relative_error(emu.data(), ref.data(), ref.size()), 2e-5) << c.spec;
            } else {
                const std::vector<float> hist = emulation::pq_attention(h, 16);
                EXPECT_LT(max_relative_error(hist.data(), ref.data(), ref.size()), 2e-5) << c.spec;
                const std::vector<float> mma = emulation::pq_attention_mma(h, 16);
                EXPECT_LT(max_relative_error(mma.data(), ref.data(), ref.size()), 1.0 / 2048) << c.spec;
            }
        }
    }
}

TEST(CudaCache, RefusesWhatOneLaunchCannotRead) {
    // A window stored as int8 (the kernels read f16 rows).
    const CacheRun int8 = run_cache("pq:m=16,calib=64,page=64,wq=int8", {300});
    EXPECT_THROW(pq_layer_read_view(*int8.cache, 0, 0), Error);
    // A dense f16 layer, and a cache that is not PQ.
    const CacheRun dense = run_cache("pq:m=16,calib=64,page=64,f16_layers=1", {300});
    EXPECT_NO_THROW(pq_layer_read_view(*dense.cache, 0, 0));
    EXPECT_THROW(pq_layer_read_view(*dense.cache, 0, 1), Error);
    const std::unique_ptr<KvCache> f16 = make_kv_cache(parse_kv_scheme("f16"), neox_shape());
    f16->add_sequence(0);
    EXPECT_THROW(pq_layer_read_view(*f16, 0, 0), Error);
    // Sequences whose quantizers differ in M cannot share a launch.
    const CacheRun a = run_cache("pq:m=16,calib=64,page=64", {300});
    const CacheRun b = run_cache("pq:m=8,calib=64,page=64", {300});
    const std::vector<PqLayerReadView> mixed{pq_layer_read_view(*a.cache, 0, 0), pq_layer_read_view(*b.cache, 0, 0)};
    const std::vector<float> q(std::size_t(2) * kKv * kGroup * kD, 0.5f);
    EXPECT_THROW(cuda_problem_from_cache(mixed, kGroup, q.data(), 0.125f, 2), Error);
    EXPECT_THROW(cuda_problem_from_cache({}, kGroup, q.data(), 0.125f, 2), Error);
}

}  // namespace
}  // namespace aqpim
