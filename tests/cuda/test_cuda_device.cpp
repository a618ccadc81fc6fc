// The CUDA kernels on a GPU against the double-precision reference (src/cuda/device_check.h).
// Without a GPU, or in a build without CUDA, every test reports skipped - never passed.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#if AQPIM_HAVE_CUDA
#include "cuda/device_check.h"
#endif

namespace aqpim {
namespace {

#if AQPIM_HAVE_CUDA
void expect_passed(std::vector<cuda::DeviceCheck> (*checks)()) {
    const std::string why = cuda::cuda_device_unavailable();
    if (!why.empty()) GTEST_SKIP() << "skipped: " << why;
    for (const cuda::DeviceCheck& c : checks()) EXPECT_LE(c.error, c.tolerance) << c.name;
}
#define AQPIM_DEVICE_TEST(name, checks) \
    TEST(CudaDevice, name) { expect_passed(checks); }
#else
#define AQPIM_DEVICE_TEST(name, checks) \
    TEST(CudaDevice, name) { GTEST_SKIP() << "skipped: this build has no CUDA (no nvcc at configure time)"; }
#endif

#if AQPIM_HAVE_CUDA
std::vector<cuda::DeviceCheck> pq_histogram_checks() { return cuda::check_pq_attention(cuda::PqValuePath::histogram); }
std::vector<cuda::DeviceCheck> pq_mma_checks() { return cuda::check_pq_attention(cuda::PqValuePath::mma); }
std::vector<cuda::DeviceCheck> pq_mma_wide_checks() { return cuda::check_pq_attention(cuda::PqValuePath::mma_wide); }
#endif

AQPIM_DEVICE_TEST(PqAttentionMatchesReference, pq_histogram_checks)
AQPIM_DEVICE_TEST(PqAttentionMmaMatchesReference, pq_mma_checks)
AQPIM_DEVICE_TEST(PqAttentionMmaWideMatchesReference, pq_mma_wide_checks)
AQPIM_DEVICE_TEST(PqAttention8BitMatchesReference, cuda::check_pq_attention_8bit)
AQPIM_DEVICE_TEST(DenseF16MatchesReference, cuda::check_dense_attention)
AQPIM_DEVICE_TEST(EncodeWritesTheHostCodes, cuda::check_encode)
AQPIM_DEVICE_TEST(DecompressFallbackMatchesReference, cuda::check_decompress_fallback)

}  // namespace
}  // namespace aqpim
