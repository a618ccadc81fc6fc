// Little-endian ByteWriter / ByteReader (aqpim/byte_io.h).

#include "aqpim/byte_io.h"

#include <bit>
#include <cstring>

#include "aqpim/error.h"

namespace aqpim {

namespace {

constexpr bool kLittleHost = std::endian::native == std::endian::little;

template <class T>
void store_le(std::uint8_t* p, T v) {
    for (std::size_t b = 0; b < sizeof(T); ++b) p[b] = std::uint8_t(std::uint64_t(v) >> (8 * b));
}
template <class T>
T load_le(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (std::size_t b = 0; b < sizeof(T); ++b) v |= std::uint64_t(p[b]) << (8 * b);
    return T(v);
}

/// n values of T (an unsigned integer type) to little-endian bytes and back: a copy on a
/// little-endian host.
template <class T>
void put_array(std::uint8_t* dst, const T* src, std::size_t n) {
    if (n == 0) return;
    if constexpr (kLittleHost)
        std::memcpy(dst, src, n * sizeof(T));
    else
        for (std::size_t i = 0; i < n; ++i) store_le(dst + i * sizeof(T), src[i]);
}
template <class T>
void get_array(T* dst, const std::uint8_t* src, std::size_t n) {
    if (n == 0) return;  // dst may be null (an empty vector's data()); memcpy's must not be
    if constexpr (kLittleHost)
        std::memcpy(dst, src, n * sizeof(T));
    else
        for (std::size_t i = 0; i < n; ++i) dst[i] = load_le<T>(src + i * sizeof(T));
}

}  // namespace

// ---- writer -----------------------------------------------------------------------------------

std::uint8_t* ByteWriter::grow(std::size_t n) {
    const std::size_t old = buf_.size();
    buf_.resize(old + n);
    return buf_.data() + old;
}

void ByteWriter::u16(std::uint16_t v) { store_le(grow(2), v); }
void ByteWriter::u32(std::uint32_t v) { store_le(grow(4), v); }
void ByteWriter::u64(std::uint64_t v) { store_le(grow(8), v); }
void ByteWriter::f32(float v) { u32(std::bit_cast<std::uint32_t>(v)); }
void ByteWriter::f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }

void ByteWriter::bytes(const void* p, std::size_t n) {
    if (n != 0) std::memcpy(grow(n), p, n);
}
void ByteWriter::u16s(const std::uint16_t* p, std::size_t n) { put_array(grow(2 * n), p, n); }
void ByteWriter::i32s(const std::int32_t* p, std::size_t n) {
    put_array(grow(4 * n), reinterpret_cast<const std::uint32_t*>(p), n);
}
void ByteWriter::f32s(const float* p, std::size_t n) {
    put_array(grow(4 * n), reinterpret_cast<const std::uint32_t*>(p), n);
}

void ByteWriter::str(std::string_view s) {
    AQPIM_CHECK(s.size() <= 0xffffffffu, "byte writer: a string of {} bytes is longer than a u32 length", s.size());
    u32(std::uint32_t(s.size()));
    bytes(s.data(), s.size());
}

std::size_t ByteWriter::begin_length() {
    const std::size_t mark = buf_.size();
    u64(0);
    return mark;
}

void ByteWriter::end_length(std::size_t mark) {
    AQPIM_ASSERT(mark + 8 <= buf_.size());
    store_le(buf_.data() + mark, std::uint64_t(buf_.size() - mark - 8));
}

// ---- reader -----------------------------------------------------------------------------------

ByteReader::ByteReader(std::span<const std::uint8_t> bytes, std::string what, std::uint64_t base)
    : bytes_(bytes), what_(std::move(what)), base_(base) {}

void ByteReader::fail(std::string_view message) const {
    AQPIM_FAIL("{}: {} (byte offset {})", what_, message, offset());
}

void ByteReader::require(std::uint64_t count, std::uint64_t elem_bytes, std::string_view field) const {
    // count * elem_bytes <= remaining, without overflow
    if (elem_bytes != 0 && count > remaining() / elem_bytes)
        fail(fmt::format("truncated: '{}' needs {} x {} bytes, {} bytes left", field, count, elem_bytes, remaining()));
}

const std::uint8_t* ByteReader::take(std::uint64_t n, std::string_view field) {
    require(n, 1, field);
    const std::uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
}

std::uint8_t ByteReader::u8(std::string_view field) { return *take(1, field); }
std::uint16_t ByteReader::u16(std::string_view field) { return load_le<std::uint16_t>(take(2, field)); }
std::uint32_t ByteReader::u32(std::string_view field) { return load_le<std::uint32_t>(take(4, field)); }
std::uint64_t ByteReader::u64(std::string_view field) { return load_le<std::uint64_t>(take(8, field)); }
float ByteReader::f32(std::string_view field) { return std::bit_cast<float>(u32(field)); }
double ByteReader::f64(std::string_view field) { return std::bit_cast<double>(u64(field)); }

std::span<const std::uint8_t> ByteReader::bytes(std::uint64_t n, std::string_view field) {
    const std::uint8_t* p = take(n, field);
    return {p, std::size_t(n)};
}

void ByteReader::u16s(std::uint16_t* out, std::uint64_t n, std::string_view field) {
    require(n, 2, field);
    get_array(out, take(2 * n, field), std::size_t(n));
}
void ByteReader::i32s(std::int32_t* out, std::uint64_t n, std::string_view field) {
    require(n, 4, field);
    get_array(reinterpret_cast<std::uint32_t*>(out), take(4 * n, field), std::size_t(n));
}
void ByteReader::f32s(float* out, std::uint64_t n, std::string_view field) {
    require(n, 4, field);
    get_array(reinterpret_cast<std::uint32_t*>(out), take(4 * n, field), std::size_t(n));
}

std::string ByteReader::str(std::uint32_t max_bytes, std::string_view field) {
    const std::uint32_t n = u32(field);
    if (n > max_bytes) fail(fmt::format("'{}' is {} bytes long, more than the {} allowed", field, n, max_bytes));
    const std::uint8_t* p = take(n, field);
    return std::string(reinterpret_cast<const char*>(p), n);
}

ByteReader ByteReader::sub(std::uint64_t n, std::string_view field) {
    const std::uint64_t at = offset();
    const std::uint8_t* p = take(n, field);
    return ByteReader({p, std::size_t(n)}, what_, at);
}

void ByteReader::expect_end(std::string_view field) const {
    if (remaining() != 0) fail(fmt::format("{} bytes left after '{}', which should end here", remaining(), field));
}

}  // namespace aqpim
