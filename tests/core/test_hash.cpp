// XXH64 against the reference implementation's published values, and streaming in any split.

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "aqpim/hash.h"

using namespace aqpim;

TEST(Xxh64, MatchesTheReferenceValues) {
    const auto h = [](const std::string& s, std::uint64_t seed = 0) { return xxh64(s.data(), s.size(), seed); };
    EXPECT_EQ(h(""), 0xEF46DB3751D8E999ull);
    EXPECT_EQ(h("", 668718853), 0x04E830582A31A119ull);
    EXPECT_EQ(h("a"), 0xD24EC4F1A98C6E5Bull);
    EXPECT_EQ(h("a", 191961062), 0x6E05BA2887C97977ull);
    EXPECT_EQ(h("abc"), 0x44BC2CF5AD770999ull);
    EXPECT_EQ(h("abcdefghijklmnopqrstuvwxyz12345"), 0x467605901B01D6F6ull);           // 31 bytes: no stripe
    EXPECT_EQ(h("abcdefghijklmnopqrstuvwxyz12345", 877380273), 0x37B562EC5715E132ull);
    EXPECT_EQ(h("The quick brown fox jumps over the lazy dog"), 0x0B242D361FDA71BCull);  // a stripe and a tail
}

TEST(Xxh64, StreamingInPiecesEqualsOneCall) {
    std::mt19937 rng(3);
    std::vector<unsigned char> data(1000);
    for (auto& b : data) b = static_cast<unsigned char>(rng());
    for (std::size_t n : {0, 1, 31, 32, 33, 64, 100, 1000})
        for (int trial = 0; trial < 20; ++trial) {
            Xxh64 s(99);
            for (std::size_t at = 0; at < n;) {
                const std::size_t step = std::min<std::size_t>(n - at, rng() % 40);
                s.update(data.data() + at, step);
                at += step;
            }
            ASSERT_EQ(s.digest(), xxh64(data.data(), n, 99)) << n;
        }
    // One flipped bit changes it.
    const std::uint64_t h = xxh64(data.data(), data.size());
    data[500] ^= 4;
    EXPECT_NE(xxh64(data.data(), data.size()), h);
}
