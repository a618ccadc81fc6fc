// ceil_div and round_up: exact multiples, one past, zero, and operands of mixed integer types.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/int_math.h"

using namespace aqpim;

TEST(IntMath, CeilDivRoundsUpOnlyPastAMultiple) {
    EXPECT_EQ(ceil_div(0, 32), 0);
    EXPECT_EQ(ceil_div(1, 32), 1);
    EXPECT_EQ(ceil_div(32, 32), 1);
    EXPECT_EQ(ceil_div(33, 32), 2);
    EXPECT_EQ(ceil_div(std::int64_t(1) << 40, 3), ((std::int64_t(1) << 40) + 2) / 3);
    static_assert(ceil_div(1023, 256) == 4 && ceil_div(1024, 256) == 4 && ceil_div(1025, 256) == 5);
}

TEST(IntMath, RoundUpGivesTheNextMultiple) {
    EXPECT_EQ(round_up(0, 64), 0);
    EXPECT_EQ(round_up(1, 64), 64);
    EXPECT_EQ(round_up(64, 64), 64);
    EXPECT_EQ(round_up(65, 64), 128);
    EXPECT_EQ(round_up(std::uint64_t(5) << 33, 32u), std::uint64_t(5) << 33);
}

TEST(IntMath, MixedOperandsComputeInTheCommonType) {
    // An int64 count over an int tile size, and a size_t over a uint32 alignment (the GGUF writer's case).
    const std::int64_t rows = (std::int64_t(1) << 33) + 1;
    EXPECT_EQ(ceil_div(rows, 8), (std::int64_t(1) << 30) + 1);
    static_assert(std::is_same_v<decltype(ceil_div(rows, 8)), std::int64_t>);
    const std::size_t size = (std::size_t(1) << 34) + 3;
    const std::uint32_t alignment = 32;
    EXPECT_EQ(round_up(size, alignment), (std::size_t(1) << 34) + 32);
    static_assert(std::is_same_v<decltype(round_up(size, alignment)), std::size_t>);
}
