#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "aqpim/error.h"
#include "pq/subspace_plan.h"

namespace aqpim {
namespace {

// [M] total variance per subspace under perm
std::vector<double> subspace_variance(const std::vector<std::int32_t>& perm, const std::vector<float>& var, int M) {
    const int ds = int(perm.size()) / M;
    std::vector<double> s(M, 0.0);
    for (std::size_t i = 0; i < perm.size(); ++i) s[i / ds] += var[perm[i]];
    return s;
}

double max_min_ratio(const std::vector<double>& v) {
    return *std::max_element(v.begin(), v.end()) / *std::min_element(v.begin(), v.end());
}

TEST(SubspacePlan, ContiguousLayouts) {
    auto none = make_subspace_plan(8, 2, RopePairs::none, SubspaceOrder::contiguous, nullptr);
    EXPECT_EQ(none, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    auto inter = make_subspace_plan(8, 2, RopePairs::interleaved, SubspaceOrder::contiguous, nullptr);
    EXPECT_EQ(inter, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    auto neox = make_subspace_plan(8, 2, RopePairs::neox, SubspaceOrder::contiguous, nullptr);
    EXPECT_EQ(neox, (std::vector<std::int32_t>{0, 4, 1, 5, 2, 6, 3, 7}));
    EXPECT_TRUE(plan_keeps_pairs(neox, 2, RopePairs::neox));
    EXPECT_FALSE(plan_keeps_pairs(none, 2, RopePairs::neox));  // dims 0 and 4 in different subspaces
}

TEST(SubspacePlan, BadShapesThrow) {
    EXPECT_THROW(check_subspace_plan(130, 32, RopePairs::none), Error);
    EXPECT_THROW(check_subspace_plan(96, 32, RopePairs::interleaved), Error);  // dsub 3
    EXPECT_THROW(check_subspace_plan(96, 32, RopePairs::neox), Error);
    EXPECT_THROW(check_subspace_plan(0, 1, RopePairs::none), Error);
    EXPECT_THROW(check_subspace_plan(8, 0, RopePairs::none), Error);
    EXPECT_NO_THROW(check_subspace_plan(96, 32, RopePairs::none));
    EXPECT_NO_THROW(check_subspace_plan(128, 32, RopePairs::neox));
    try {
        check_subspace_plan(130, 32, RopePairs::none);
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("D=130 is not divisible by M=32"), std::string::npos) << e.what();
    }
}

TEST(SubspacePlan, BalancedKeepsPairsAndIsAPermutation) {
    const int D = 64, M = 8;
    std::vector<float> var(D);
    for (int d = 0; d < D; ++d) var[d] = float((d * 37) % 11 + 1) * (d % 13 == 0 ? 50.0f : 1.0f);
    for (RopePairs pairs : {RopePairs::none, RopePairs::interleaved, RopePairs::neox}) {
        auto perm = make_subspace_plan(D, M, pairs, SubspaceOrder::variance_balanced, var.data());
        ASSERT_EQ(perm.size(), std::size_t(D));
        EXPECT_TRUE(is_permutation(perm));
        EXPECT_TRUE(plan_keeps_pairs(perm, M, pairs)) << int(pairs);
    }
}

TEST(SubspacePlan, BalancedSpreadsHotChannels) {
    const int D = 32, M = 4;
    std::vector<float> var(D, 1.0f);
    for (int d : {0, 2, 4, 6}) var[d] = 40.0f;  // four hot channels (in four RoPE pairs), all in subspace 0 when contiguous
    for (RopePairs pairs : {RopePairs::none, RopePairs::interleaved, RopePairs::neox}) {
        auto contiguous = make_subspace_plan(D, M, pairs, SubspaceOrder::contiguous, var.data());
        auto balanced = make_subspace_plan(D, M, pairs, SubspaceOrder::variance_balanced, var.data());
        double r_contiguous = max_min_ratio(subspace_variance(contiguous, var, M));
        double r_balanced = max_min_ratio(subspace_variance(balanced, var, M));
        EXPECT_GT(r_contiguous, 10.0) << "pairs " << int(pairs);
        EXPECT_LT(r_balanced, 1.01) << "pairs " << int(pairs);  // one hot channel per subspace
    }
}

TEST(SubspacePlan, PermutationChecks) {
    EXPECT_TRUE(is_permutation(std::vector<std::int32_t>{2, 0, 1}));
    EXPECT_FALSE(is_permutation(std::vector<std::int32_t>{2, 2, 1}));
    EXPECT_FALSE(is_permutation(std::vector<std::int32_t>{0, 1, 3}));
    EXPECT_FALSE(is_permutation(std::vector<std::int32_t>{0, -1, 2}));
    EXPECT_TRUE(is_identity_permutation(std::vector<std::int32_t>{0, 1, 2}));
    EXPECT_FALSE(is_identity_permutation(std::vector<std::int32_t>{1, 0, 2}));
}

}  // namespace
}  // namespace aqpim
