// GGUF reader: every count, length, type, dimension and offset is checked against the mapped file
// before it is used, so a truncated, corrupted or hostile file gives an aqpim::Error naming the
// field, never a read past the mapping or an absurd allocation.

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "core/int_math.h"

namespace aqpim {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr std::uint64_t kMaxAlignment = std::uint64_t(1) << 30;
constexpr int kMaxDims = 4;                  // GGML_MAX_DIMS
constexpr std::uint64_t kMaxNameBytes = 256;  // llama.cpp allows 63; be lenient but bounded
// Longest metadata array: real vocabularies and merge lists have well under a million entries;
// the bound keeps a hostile file from making the decoded arrays (8 bytes or more per element)
// many times larger than the file.
constexpr std::uint64_t kMaxArrayLength = std::uint64_t(1) << 24;
// Smallest possible encodings, used to bound counts by the bytes left before reading entries:
// key/name length (8) + at least one byte, value type (4) + at least one value byte.
constexpr std::uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// name length (8) + one byte, n_dims (4), one dimension (8), type (4), offset (8).
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

const char* value_type_name(GgufValueType t) {
    switch (t) {
        case GgufValueType::UINT8: return "uint8";
        case GgufValueType::INT8: return "int8";
        case GgufValueType::UINT16: return "uint16";
        case GgufValueType::INT16: return "int16";
        case GgufValueType::UINT32: return "uint32";
        case GgufValueType::INT32: return "int32";
        case GgufValueType::FLOAT32: return "float32";
        case GgufValueType::BOOL: return "bool";
        case GgufValueType::STRING: return "string";
        case GgufValueType::ARRAY: return "array";
        case GgufValueType::UINT64: return "uint64";
        case GgufValueType::INT64: return "int64";
        case GgufValueType::FLOAT64: return "float64";
    }
    return "unknown";
}

bool is_known_value_type(std::uint32_t t) { return t <= 12; }

bool is_integer(GgufValueType t) {
    switch (t) {
        case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::UINT16: case GgufValueType::INT16:
        case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::UINT64: case GgufValueType::INT64:
            return true;
        default: return false;
    }
}
bool is_signed(GgufValueType t) {
    return t == GgufValueType::INT8 || t == GgufValueType::INT16 || t == GgufValueType::INT32 ||
           t == GgufValueType::INT64;
}
bool is_float(GgufValueType t) { return t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64; }

/// Bytes of one scalar of type t (strings and arrays: their smallest encoding).
std::uint64_t min_value_bytes(GgufValueType t) {
    switch (t) {
        case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
        case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
        case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
        case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
        case GgufValueType::STRING: return 8;
        case GgufValueType::ARRAY: return 4 + 8;
    }
    return 1;
}

std::string describe_type(const GgufValue& v) {
    if (v.type == GgufValueType::ARRAY) return fmt::format("an array of {}", value_type_name(v.array_type));
    const char* name = value_type_name(v.type);
    return fmt::format("{} {}", name[0] == 'i' ? "an" : "a", name);
}

/// Bounds-checked little-endian reads from the mapping; `pos` only moves forward.
class Cursor {
public:
    Cursor(const std::uint8_t* data, std::uint64_t size, const std::string& ctx) : data_(data), size_(size), ctx_(ctx) {}

    std::uint64_t pos() const { return pos_; }
    std::uint64_t left() const { return size_ - pos_; }

    template <class F>
    void need(std::uint64_t n, F&& what) const {
        if (n > left())
            AQPIM_FAIL("{}: {} at offset {} needs {} bytes but only {} remain (file size {})", ctx_, what(), pos_, n,
                       left(), size_);
    }

    template <class T, class F>
    T read(F&& what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    template <class F>
    std::string read_string(F&& what) {
        const auto n = read<std::uint64_t>([&] { return what() + " length"; });
        if (n > left())
            AQPIM_FAIL("{}: {} length {} at offset {} runs past the end of the file ({} bytes remain)", ctx_, what(), n,
                       pos_ - 8, left());
        std::string s(reinterpret_cast<const char*>(data_ + pos_), std::size_t(n));
        pos_ += n;
        return s;
    }

private:
    const std::uint8_t* data_;
    std::uint64_t size_;
    std::uint64_t pos_ = 0;
    const std::string& ctx_;
};

std::int64_t read_int_element(Cursor& c, GgufValueType t, const std::string& ctx, const std::string& key) {
    auto what = [&] { return fmt::format("key '{}' value", key); };
    switch (t) {
        case GgufValueType::UINT8: return c.read<std::uint8_t>(what);
        case GgufValueType::INT8: return c.read<std::int8_t>(what);
        case GgufValueType::UINT16: return c.read<std::uint16_t>(what);
        case GgufValueType::INT16: return c.read<std::int16_t>(what);
        case GgufValueType::UINT32: return c.read<std::uint32_t>(what);
        case GgufValueType::INT32: return c.read<std::int32_t>(what);
        case GgufValueType::INT64: return c.read<std::int64_t>(what);
        case GgufValueType::UINT64: {
            const auto v = c.read<std::uint64_t>(what);
            AQPIM_CHECK(v <= std::uint64_t(std::numeric_limits<std::int64_t>::max()),
                        "{}: key '{}': array element {} exceeds the int64 range", ctx, key, v);
            return std::int64_t(v);
        }
        case GgufValueType::BOOL: {
            const auto v = c.read<std::uint8_t>(what);
            AQPIM_CHECK(v <= 1, "{}: key '{}': bool value {} is neither 0 nor 1", ctx, key, v);
            return v;
        }
        default: AQPIM_FAIL("{}: key '{}': {} is not an integer type", ctx, key, value_type_name(t));
    }
}

double read_float_element(Cursor& c, GgufValueType t, const std::string& key) {
    auto what = [&] { return fmt::format("key '{}' value", key); };
    if (t == GgufValueType::FLOAT32) return c.read<float>(what);
    return c.read<double>(what);
}

GgufValue read_value(Cursor& c, std::uint32_t raw_type, const std::string& ctx, const std::string& key) {
    AQPIM_CHECK(is_known_value_type(raw_type), "{}: key '{}' has unknown value type {}", ctx, key, raw_type);
    GgufValue v;
    v.type = GgufValueType(raw_type);
    if (v.type == GgufValueType::STRING) {
        v.value = c.read_string([&] { return fmt::format("key '{}' string", key); });
    } else if (v.type == GgufValueType::BOOL) {
        v.value = read_int_element(c, v.type, ctx, key) != 0;
    } else if (v.type == GgufValueType::UINT64) {  // the full range, checked by get_int when used
        v.value = c.read<std::uint64_t>([&] { return fmt::format("key '{}' value", key); });
    } else if (is_integer(v.type)) {
        const std::int64_t x = read_int_element(c, v.type, ctx, key);
        if (is_signed(v.type))
            v.value = x;
        else
            v.value = std::uint64_t(x);
    } else if (is_float(v.type)) {
        v.value = read_float_element(c, v.type, key);
    } else {  // ARRAY
        const auto elem = c.read<std::uint32_t>([&] { return fmt::format("key '{}' array element type", key); });
        AQPIM_CHECK(is_known_value_type(elem), "{}: key '{}' is an array of unknown value type {}", ctx, key, elem);
        v.array_type = GgufValueType(elem);
        AQPIM_CHECK(v.array_type != GgufValueType::ARRAY, "{}: key '{}' is an array of arrays (not supported)", ctx,
                    key);
        const auto n = c.read<std::uint64_t>([&] { return fmt::format("key '{}' array length", key); });
        AQPIM_CHECK(n <= kMaxArrayLength, "{}: key '{}': array length {} exceeds the limit of {} elements", ctx, key, n,
                    kMaxArrayLength);
        const std::uint64_t elem_bytes = min_value_bytes(v.array_type);
        AQPIM_CHECK(n <= c.left() / elem_bytes,
                    "{}: key '{}': array length {} is impossible: each {} element needs at least {} bytes and only {} "
                    "remain",
                    ctx, key, n, value_type_name(v.array_type), elem_bytes, c.left());
        const std::size_t count = std::size_t(n);
        if (v.array_type == GgufValueType::STRING) {
            std::vector<std::string> out;
            out.reserve(count);
            for (std::size_t i = 0; i < count; ++i)
                out.push_back(c.read_string([&] { return fmt::format("key '{}' element {}", key, i); }));
            v.value = std::move(out);
        } else if (is_float(v.array_type)) {
            std::vector<double> out(count);
            for (std::size_t i = 0; i < count; ++i) out[i] = read_float_element(c, v.array_type, key);
            v.value = std::move(out);
        } else {
            std::vector<std::int64_t> out(count);
            for (std::size_t i = 0; i < count; ++i) out[i] = read_int_element(c, v.array_type, ctx, key);
            v.value = std::move(out);
        }
    }
    return v;
}

}  // namespace

std::int64_t GgufTensorInfo::n_elements() const {
    std::int64_t n = 1;
    for (auto d : ne) n *= d;
    return n;
}

GgufFile::GgufFile(const std::string& path) : path_(path), file_(std::make_shared<MappedFile>(path)) {
    const std::string ctx = "gguf " + path;
    const std::uint64_t size = file_->size();
    Cursor c(file_->data(), size, ctx);

    // ---- header
    c.need(4, [] { return std::string("magic"); });
    AQPIM_CHECK(std::memcmp(file_->data(), kMagic, 4) == 0, "{}: not a GGUF file (magic {:02x} {:02x} {:02x} {:02x})",
                ctx, file_->data()[0], file_->data()[1], file_->data()[2], file_->data()[3]);
    c.read<std::uint32_t>([] { return std::string("magic"); });
    version_ = c.read<std::uint32_t>([] { return std::string("version"); });
    AQPIM_CHECK((version_ & 0xffffu) != 0 || version_ == 0,
                "{}: version field {:#010x} looks byte-swapped: big-endian GGUF files are not supported", ctx, version_);
    AQPIM_CHECK(version_ != 1, "{}: GGUF version 1 is not supported (convert the model again with a current llama.cpp)",
                ctx);
    AQPIM_CHECK(version_ == 2 || version_ == 3, "{}: unsupported GGUF version {} (supported: 2, 3)", ctx, version_);
    const auto n_tensors = c.read<std::uint64_t>([] { return std::string("tensor count"); });
    const auto n_metadata = c.read<std::uint64_t>([] { return std::string("metadata count"); });
    AQPIM_CHECK(n_metadata <= c.left() / kMinKvBytes,
                "{}: metadata count {} is impossible: each entry needs at least {} bytes and only {} remain", ctx, n_metadata,
                kMinKvBytes, c.left());
    AQPIM_CHECK(n_tensors <= c.left() / kMinTensorInfoBytes,
                "{}: tensor count {} is impossible: each tensor info needs at least {} bytes and only {} remain", ctx,
                n_tensors, kMinTensorInfoBytes, c.left());
    AQPIM_CHECK(n_metadata * kMinKvBytes + n_tensors * kMinTensorInfoBytes <= c.left(),
                "{}: {} metadata entries and {} tensor infos need more than the {} bytes that remain", ctx, n_metadata,
                n_tensors, c.left());

    // ---- metadata
    for (std::uint64_t i = 0; i < n_metadata; ++i) {
        std::string key = c.read_string([&] { return fmt::format("metadata key #{}", i); });
        AQPIM_CHECK(!key.empty(), "{}: metadata key #{} is empty", ctx, i);
        AQPIM_CHECK(!kv_.count(key), "{}: metadata key '{}' appears twice", ctx, key);
        const auto type = c.read<std::uint32_t>([&] { return fmt::format("key '{}' value type", key); });
        GgufValue v = read_value(c, type, ctx, key);
        kv_.emplace(std::move(key), std::move(v));
    }

    std::uint64_t alignment = kDefaultAlignment;
    if (has("general.alignment")) {
        const std::int64_t a = get_int("general.alignment");
        AQPIM_CHECK(a > 0 && std::uint64_t(a) <= kMaxAlignment && (a & (a - 1)) == 0,
                    "{}: general.alignment {} is not a power of two in [1, {}]", ctx, a, kMaxAlignment);
        alignment = std::uint64_t(a);
    }

    // ---- tensor infos
    tensors_.reserve(std::size_t(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = c.read_string([&] { return fmt::format("tensor #{} name", i); });
        AQPIM_CHECK(!t.name.empty() && t.name.size() <= kMaxNameBytes,
                    "{}: tensor #{} name has {} bytes (expected 1 to {})", ctx, i, t.name.size(), kMaxNameBytes);
        AQPIM_CHECK(!tensor_index_.count(t.name), "{}: tensor '{}' appears twice", ctx, t.name);
        auto field = [&](const char* f) { return [&t, f] { return fmt::format("tensor '{}' {}", t.name, f); }; };
        const auto n_dims = c.read<std::uint32_t>(field("n_dims"));
        AQPIM_CHECK(n_dims >= 1 && n_dims <= std::uint32_t(kMaxDims), "{}: tensor '{}': n_dims {} is not in [1, {}]",
                    ctx, t.name, n_dims, kMaxDims);
        std::uint64_t n_elem = 1;
        for (std::uint32_t d = 0; d < n_dims; ++d) {
            const auto ne = c.read<std::uint64_t>(field("dimension"));
            AQPIM_CHECK(ne >= 1 && ne <= std::uint64_t(std::numeric_limits<std::int64_t>::max()),
                        "{}: tensor '{}': ne[{}] = {} (expected at least 1)", ctx, t.name, d, ne);
            AQPIM_CHECK(n_elem <= std::uint64_t(std::numeric_limits<std::int64_t>::max()) / ne,
                        "{}: tensor '{}': element count overflows at ne[{}] = {}", ctx, t.name, d, ne);
            n_elem *= ne;
            t.ne.push_back(std::int64_t(ne));
        }
        const auto type = c.read<std::uint32_t>(field("type"));
        t.type = GgmlType(type);
        const GgmlTypeTraits traits = ggml_type_traits(t.type);
        AQPIM_CHECK(traits.block_size > 0, "{}: tensor '{}' has unknown type {}", ctx, t.name, type);
        AQPIM_CHECK(t.ne[0] % traits.block_size == 0,
                    "{}: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", ctx, t.name, t.ne[0],
                    traits.name, traits.block_size);
        const std::uint64_t row_bytes = ggml_row_bytes(t.type, t.ne[0]);
        const std::uint64_t n_rows = n_elem / std::uint64_t(t.ne[0]);
        AQPIM_CHECK(n_rows <= std::numeric_limits<std::uint64_t>::max() / row_bytes,
                    "{}: tensor '{}': byte size overflows", ctx, t.name);
        t.n_bytes = row_bytes * n_rows;
        t.offset = c.read<std::uint64_t>(field("offset"));
        AQPIM_CHECK(t.offset % alignment == 0, "{}: tensor '{}': offset {} is not a multiple of the alignment {}", ctx,
                    t.name, t.offset, alignment);
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    // ---- data section
    const std::uint64_t infos_end = c.pos();
    data_start_ = round_up(infos_end, alignment);
    if (tensors_.empty()) return;
    AQPIM_CHECK(data_start_ <= size, "{}: data section starts at {} past the end of the file (size {})", ctx,
                data_start_, size);
    const std::uint64_t data_size = size - data_start_;
    for (const auto& t : tensors_) {
        AQPIM_CHECK(t.offset <= data_size && t.n_bytes <= data_size - t.offset,
                    "{}: tensor '{}': offset {} + {} bytes runs past the end of the data section ({} bytes; file size {})",
                    ctx, t.name, t.offset, t.n_bytes, data_size, size);
    }
    std::vector<std::size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (std::size_t k = 1; k < order.size(); ++k) {
        const auto& a = tensors_[order[k - 1]];
        const auto& b = tensors_[order[k]];
        AQPIM_CHECK(a.offset + a.n_bytes <= b.offset, "{}: tensors '{}' (offset {}, {} bytes) and '{}' (offset {}) overlap",
                    ctx, a.name, a.offset, a.n_bytes, b.name, b.offset);
    }
}

// ---- metadata getters ---------------------------------------------------------------------------

namespace {

const GgufValue& lookup(const std::map<std::string, GgufValue>& kv, const std::string& path, const std::string& key) {
    auto it = kv.find(key);
    AQPIM_CHECK(it != kv.end(), "gguf {}: metadata key '{}' is missing", path, key);
    return it->second;
}

[[noreturn]] void wrong_kind(const std::string& path, const std::string& key, const GgufValue& v, const char* expected) {
    AQPIM_FAIL("gguf {}: metadata key '{}' is {}, expected {}", path, key, describe_type(v), expected);
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
    const GgufValue& v = lookup(kv_, path_, key);
    if (v.type != GgufValueType::STRING) wrong_kind(path_, key, v, "a string");
    return std::get<std::string>(v.value);
}

std::int64_t GgufFile::get_int(const std::string& key) const {
    const GgufValue& v = lookup(kv_, path_, key);
    if (!is_integer(v.type)) wrong_kind(path_, key, v, "an integer");
    if (const auto* u = std::get_if<std::uint64_t>(&v.value)) {
        AQPIM_CHECK(*u <= std::uint64_t(std::numeric_limits<std::int64_t>::max()),
                    "gguf {}: metadata key '{}' = {} exceeds the int64 range", path_, key, *u);
        return std::int64_t(*u);
    }
    return std::get<std::int64_t>(v.value);
}

double GgufFile::get_float(const std::string& key) const {
    const GgufValue& v = lookup(kv_, path_, key);
    if (!is_float(v.type)) wrong_kind(path_, key, v, "a float32 or float64");
    return std::get<double>(v.value);
}

bool GgufFile::get_bool(const std::string& key) const {
    const GgufValue& v = lookup(kv_, path_, key);
    if (v.type != GgufValueType::BOOL) wrong_kind(path_, key, v, "a bool");
    return std::get<bool>(v.value);
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue& v = lookup(kv_, path_, key);
    if (v.type != GgufValueType::ARRAY || v.array_type != GgufValueType::STRING)
        wrong_kind(path_, key, v, "an array of string");
    return std::get<std::vector<std::string>>(v.value);
}

std::vector<std::int64_t> GgufFile::get_int_array(const std::string& key) const {
    const GgufValue& v = lookup(kv_, path_, key);
    if (v.type != GgufValueType::ARRAY || !is_integer(v.array_type)) wrong_kind(path_, key, v, "an array of integers");
    return std::get<std::vector<std::int64_t>>(v.value);
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
    const GgufValue& v = lookup(kv_, path_, key);
    if (v.type != GgufValueType::ARRAY || !is_float(v.array_type)) wrong_kind(path_, key, v, "an array of floats");
    return std::get<std::vector<double>>(v.value);
}

std::optional<std::int64_t> GgufFile::find_int(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_int(key);
}
std::optional<double> GgufFile::find_float(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_float(key);
}
std::optional<std::string> GgufFile::find_string(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_string(key);
}
std::optional<bool> GgufFile::find_bool(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_bool(key);
}

// ---- tensors ------------------------------------------------------------------------------------

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
    const GgufTensorInfo* t = find_tensor(name);
    AQPIM_CHECK(t != nullptr, "gguf {}: no tensor named '{}'", path_, name);
    return *t;
}

const std::uint8_t* GgufFile::tensor_data(const GgufTensorInfo& info) const {
    return file_->data() + data_start_ + info.offset;
}

}  // namespace aqpim
