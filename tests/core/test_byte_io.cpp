// ByteWriter / ByteReader: explicit little-endian layout, round trips, and a reader that names the
// field and refuses counts larger than the bytes left before anything is allocated.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "support/errors.h"

using namespace aqpim;

using test::error_of;

TEST(ByteIo, FieldsAreLittleEndianWhateverTheHost) {
    ByteWriter w;
    w.u16(0x0102);
    w.u32(0x01020304u);
    w.u64(0x0102030405060708ull);
    w.f32(1.0f);  // 0x3f800000
    const std::vector<std::uint8_t> want = {0x02, 0x01, 0x04, 0x03, 0x02, 0x01, 0x08, 0x07, 0x06, 0x05,
                                            0x04, 0x03, 0x02, 0x01, 0x00, 0x00, 0x80, 0x3f};
    EXPECT_EQ(w.data(), want);
    const std::uint16_t h[2] = {0xabcd, 0x1234};
    ByteWriter a;
    a.u16s(h, 2);
    EXPECT_EQ(a.data(), (std::vector<std::uint8_t>{0xcd, 0xab, 0x34, 0x12}));
}

TEST(ByteIo, RoundTripsEveryType) {
    ByteWriter w;
    w.u8(7);
    w.u16(65535);
    w.u32(0xdeadbeef);
    w.i64(-5);
    w.f32(-0.0f);
    w.f64(3.25);
    const float fs[3] = {1.5f, -2.0f, std::numeric_limits<float>::denorm_min()};
    const std::int32_t is[2] = {-1, 1 << 30};
    w.f32s(fs, 3);
    w.i32s(is, 2);
    w.str("scheme");
    const std::size_t mark = w.begin_length();
    w.u32(1);
    w.end_length(mark);
    ByteReader r(w.data(), "t");
    EXPECT_EQ(r.u8("a"), 7);
    EXPECT_EQ(r.u16("b"), 65535);
    EXPECT_EQ(r.u32("c"), 0xdeadbeefu);
    EXPECT_EQ(r.i64("d"), -5);
    EXPECT_TRUE(std::signbit(r.f32("e")));
    EXPECT_EQ(r.f64("f"), 3.25);
    float gf[3];
    std::int32_t gi[2];
    r.f32s(gf, 3, "g");
    r.i32s(gi, 2, "h");
    EXPECT_EQ(std::memcmp(gf, fs, sizeof fs), 0);
    EXPECT_EQ(gi[0], -1);
    EXPECT_EQ(gi[1], 1 << 30);
    EXPECT_EQ(r.str(10, "i"), "scheme");
    EXPECT_EQ(r.u64("length"), 4u);
    ByteReader sub = r.sub(4, "section");
    EXPECT_EQ(sub.offset(), r.offset() - 4);
    EXPECT_EQ(sub.u32("j"), 1u);
    r.expect_end("all");
}

TEST(ByteIo, ReaderNamesTheFieldAndNeverTrustsACount) {
    const std::vector<std::uint8_t> five = {1, 2, 3, 4, 5};
    ByteReader r(five, "kv state", 100);
    r.u32("first");
    EXPECT_NE(error_of([&] { r.u32("layer 3 keys"); }).find("'layer 3 keys'"), std::string::npos);
    ByteReader q(five, "kv state");
    // A count whose byte size overflows 64 bits is refused, not wrapped.
    const std::string e = error_of([&] { q.require(std::numeric_limits<std::uint64_t>::max() / 2, 4, "codes"); });
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    EXPECT_NE(e.find("(byte offset 0)"), std::string::npos) << e;
    EXPECT_NE(error_of([&] { q.bytes(6, "rows"); }).find("5 bytes left"), std::string::npos);
    ByteWriter w;
    w.str("a long name");
    ByteReader s(w.data(), "kv state");
    EXPECT_NE(error_of([&] { s.str(4, "name"); }).find("more than the 4 allowed"), std::string::npos);
    ByteReader t(five, "kv state");
    t.u8("x");
    EXPECT_NE(error_of([&] { t.expect_end("x"); }).find("4 bytes left"), std::string::npos);
    EXPECT_EQ(error_of([&] { ByteReader(five, "k").require(5, 1, "ok"); }), "");
}
