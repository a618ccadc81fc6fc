#pragma once
// Little-endian byte streams for the binary formats the library writes (the KV state,
// docs/kv-state.md): a writer that appends fixed-width fields, and a reader of untrusted bytes that
// names the field it reads in every error and checks every count against the bytes left before
// anything is allocated, so a hostile size fails as "truncated", never as a huge allocation.
//
// Every multi-byte value is little-endian whatever the host; f16 values are their IEEE binary16
// bits as u16, f32 / f64 their binary32 / binary64 bits as u32 / u64.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace aqpim {

class ByteWriter {
public:
    void u8(std::uint8_t v) { buf_.push_back(v); }
    void u16(std::uint16_t v);
    void u32(std::uint32_t v);
    void u64(std::uint64_t v);
    void i64(std::int64_t v) { u64(std::uint64_t(v)); }
    void f32(float v);
    void f64(double v);
    /// Raw bytes, as they are.
    void bytes(const void* p, std::size_t n);
    /// Arrays of n values, each little-endian.
    void u16s(const std::uint16_t* p, std::size_t n);
    void i32s(const std::int32_t* p, std::size_t n);
    void f32s(const float* p, std::size_t n);
    /// u32 length, then the bytes.
    void str(std::string_view s);

    /// A u64 placeholder at the end; end_length(mark) fills it with the bytes appended after it
    /// (section lengths).
    std::size_t begin_length();
    void end_length(std::size_t mark);

    std::size_t size() const { return buf_.size(); }
    const std::vector<std::uint8_t>& data() const { return buf_; }
    std::vector<std::uint8_t>& data() { return buf_; }
    std::vector<std::uint8_t> take() { return std::move(buf_); }
    void reserve(std::size_t n) { buf_.reserve(n); }

private:
    std::uint8_t* grow(std::size_t n);
    std::vector<std::uint8_t> buf_;
};

/// Reads a span it does not own. Errors are aqpim::Error "<what>: <message> (byte offset N)".
class ByteReader {
public:
    /// `what` starts every message ("kv state"); `base` is the offset of bytes[0] in the whole input
    /// (sub-readers report offsets in the file).
    ByteReader(std::span<const std::uint8_t> bytes, std::string what, std::uint64_t base = 0);

    std::uint8_t u8(std::string_view field);
    std::uint16_t u16(std::string_view field);
    std::uint32_t u32(std::string_view field);
    std::uint64_t u64(std::string_view field);
    std::int64_t i64(std::string_view field) { return std::int64_t(u64(field)); }
    float f32(std::string_view field);
    double f64(std::string_view field);

    /// Throws unless `count` elements of `elem_bytes` bytes each are left (no overflow): call before
    /// allocating for them.
    void require(std::uint64_t count, std::uint64_t elem_bytes, std::string_view field) const;
    /// The next n bytes (a view into the input).
    std::span<const std::uint8_t> bytes(std::uint64_t n, std::string_view field);
    /// n values into out (n checked against the bytes left first; out has room for n).
    void u16s(std::uint16_t* out, std::uint64_t n, std::string_view field);
    void i32s(std::int32_t* out, std::uint64_t n, std::string_view field);
    void f32s(float* out, std::uint64_t n, std::string_view field);
    /// A u32 length (at most max_bytes), then the bytes.
    std::string str(std::uint32_t max_bytes, std::string_view field);
    /// A reader over the next n bytes (a section), which this one skips.
    ByteReader sub(std::uint64_t n, std::string_view field);

    std::uint64_t remaining() const { return bytes_.size() - pos_; }
    std::uint64_t offset() const { return base_ + pos_; }  ///< of the next byte, in the whole input
    const std::string& what() const { return what_; }
    /// Throws unless every byte was read (`field` names what should have ended).
    void expect_end(std::string_view field) const;
    /// Throw aqpim::Error "<what>: <message> (byte offset N)".
    [[noreturn]] void fail(std::string_view message) const;

private:
    const std::uint8_t* take(std::uint64_t n, std::string_view field);

    std::span<const std::uint8_t> bytes_;
    std::string what_;
    std::uint64_t base_ = 0, pos_ = 0;
};

}  // namespace aqpim
