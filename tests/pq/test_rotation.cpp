#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "pq/rotation.h"

namespace aqpim {
namespace {

// Max |Mᵀ·M - I| entry of a [D][D] row-major matrix.
double orthogonality_error(const std::vector<float>& R, int D) {
    double worst = 0;
    for (int a = 0; a < D; ++a)
        for (int b = 0; b < D; ++b) {
            double s = 0;
            for (int r = 0; r < D; ++r) s += double(R[r * D + a]) * R[r * D + b];
            worst = std::max(worst, std::abs(s - (a == b ? 1.0 : 0.0)));
        }
    return worst;
}

// The Hadamard rotation as a matrix: column c = R · e_c.
std::vector<float> hadamard_matrix(const std::vector<float>& signs, int D, bool transpose) {
    std::vector<float> R(std::size_t(D) * D), e(D);
    for (int c = 0; c < D; ++c) {
        std::fill(e.begin(), e.end(), 0.0f);
        e[c] = 1.0f;
        hadamard_rotate(signs.data(), D, e.data(), transpose);
        for (int r = 0; r < D; ++r) R[r * D + c] = e[r];
    }
    return R;
}

TEST(Rotation, FwhtKnownValues) {
    std::vector<float> x = {1, 0, 0, 0};
    fwht(x.data(), 4);
    EXPECT_EQ(x, (std::vector<float>{1, 1, 1, 1}));
    x = {1, 2, 3, 4};
    fwht(x.data(), 4);
    EXPECT_EQ(x, (std::vector<float>{10, -2, -4, 0}));
}

TEST(Rotation, HadamardIsOrthogonalAndTransposeInverts) {
    for (int D : {1, 2, 16, 128}) {
        auto signs = random_signs(D, 7);
        for (float s : signs) EXPECT_TRUE(s == 1.0f || s == -1.0f);
        auto R = hadamard_matrix(signs, D, false), Rt = hadamard_matrix(signs, D, true);
        EXPECT_LT(orthogonality_error(R, D), 1e-5) << D;
        for (int a = 0; a < D; ++a)
            for (int b = 0; b < D; ++b) ASSERT_NEAR(Rt[a * D + b], R[b * D + a], 1e-6) << D;
    }
}

TEST(Rotation, RandomOrthogonalIsOrthogonal) {
    for (int D : {1, 5, 64, 96}) {
        auto R = random_orthogonal(D, 3);
        EXPECT_LT(orthogonality_error(R, D), 2e-6) << D;
        std::vector<float> x(D), y(D), back(D);
        for (int d = 0; d < D; ++d) x[d] = std::sin(float(d) + 0.5f);
        matrix_rotate(R.data(), D, x.data(), y.data(), false);
        matrix_rotate(R.data(), D, y.data(), back.data(), true);
        for (int d = 0; d < D; ++d) EXPECT_NEAR(back[d], x[d], 1e-5);
    }
}

TEST(Rotation, DeterministicForASeed) {
    EXPECT_EQ(random_orthogonal(32, 11), random_orthogonal(32, 11));
    EXPECT_NE(random_orthogonal(32, 11), random_orthogonal(32, 12));
    EXPECT_EQ(random_signs(64, 5), random_signs(64, 5));
    EXPECT_NE(random_signs(64, 5), random_signs(64, 6));
}

}  // namespace
}  // namespace aqpim
