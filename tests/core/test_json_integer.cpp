// JSON integers into C++ integers without conversions (aqpim/json_integer.h).

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "aqpim/json_integer.h"

namespace aqpim {
namespace {

using nlohmann::json;
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min(), kMax = std::numeric_limits<std::int64_t>::max();

TEST(JsonInteger, ReadsIntegersInRangeAndNothingElse) {
    EXPECT_EQ(json_integer_in(json::parse("5"), 1, 10), 5);  // parsed as unsigned
    EXPECT_EQ(json_integer_in(json::parse("-5"), -10, 10), -5);
    EXPECT_EQ(json_integer_in(json::parse("10"), 1, 10), 10);
    EXPECT_EQ(json_integer_in(json::parse("0"), 1, 10), std::nullopt);
    EXPECT_EQ(json_integer_in(json::parse("11"), 1, 10), std::nullopt);
    EXPECT_EQ(json_integer_in(json::parse("-1"), 0, 10), std::nullopt);
    EXPECT_EQ(json_integer_in(json::parse("3"), -10, -1), std::nullopt);  // unsigned against a negative range
    for (const char* not_integer : {"3.5", "3.0", "1e30", "\"3\"", "true", "null", "[3]"})
        EXPECT_EQ(json_integer_in(json::parse(not_integer), kMin, kMax), std::nullopt) << not_integer;
}

TEST(JsonInteger, TheEdgesOfInt64DoNotWrap) {
    EXPECT_EQ(json_integer_in(json::parse("9223372036854775807"), kMin, kMax), kMax);
    EXPECT_EQ(json_integer_in(json::parse("-9223372036854775808"), kMin, kMax), kMin);
    EXPECT_EQ(json_integer_in(json::parse("9223372036854775808"), kMin, kMax), std::nullopt);   // uint64 only
    EXPECT_EQ(json_integer_in(json::parse("18446744073709551615"), kMin, kMax), std::nullopt);  // would wrap to -1
    EXPECT_EQ(json_integer_in(json::parse("6666666666666666666663"), kMin, kMax), std::nullopt);  // a double
}

}  // namespace
}  // namespace aqpim
