// GGUF v3 writer: metadata in insertion order, tensor infos, padding, then each tensor's bytes at
// an aligned offset. Tensor bytes are produced row chunk by row chunk while writing, so a model
// larger than memory can be generated; the file appears under its final name only when complete.

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/gguf.h"
#include "core/int_math.h"

namespace aqpim {

namespace {

constexpr std::uint64_t kDefaultAlignment = 32;
constexpr std::size_t kMaxTensorName = 63;  // llama.cpp: GGML_MAX_NAME - 1
constexpr std::uint64_t kChunkBytes = std::uint64_t(16) << 20;

template <class T>
void put(std::vector<std::uint8_t>& out, T v) {
    const auto n = out.size();
    out.resize(n + sizeof(T));
    std::memcpy(out.data() + n, &v, sizeof(T));
}

void put_string(std::vector<std::uint8_t>& out, const std::string& s) {
    put<std::uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

std::vector<std::uint8_t> encoded(GgufValueType t) {
    std::vector<std::uint8_t> out;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t));
    return out;
}

std::vector<std::uint8_t> encoded_array(GgufValueType elem, std::size_t n) {
    auto out = encoded(GgufValueType::ARRAY);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(elem));
    put<std::uint64_t>(out, n);
    return out;
}

}  // namespace

GgufWriter::GgufWriter(std::uint32_t alignment) : alignment_(alignment) {
    AQPIM_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf writer: alignment {} is not a power of two",
                alignment);
    if (alignment != kDefaultAlignment) set_u32("general.alignment", alignment);
}

// ---- metadata -----------------------------------------------------------------------------------

void GgufWriter::set_encoded(const std::string& key, std::vector<std::uint8_t> value) {
    AQPIM_CHECK(!key.empty(), "gguf writer: empty metadata key");
    for (auto& e : entries_)
        if (e.key == key) {
            e.value = std::move(value);
            return;
        }
    entries_.push_back({key, std::move(value)});
}

void GgufWriter::set_string(const std::string& key, const std::string& v) {
    auto out = encoded(GgufValueType::STRING);
    put_string(out, v);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_u32(const std::string& key, std::uint32_t v) {
    AQPIM_CHECK(key != "general.alignment" || v == alignment_,
                "gguf writer: general.alignment {} differs from the writer's alignment {} (pass it to the constructor)",
                v, alignment_);
    auto out = encoded(GgufValueType::UINT32);
    put(out, v);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_i32(const std::string& key, std::int32_t v) {
    AQPIM_CHECK(key != "general.alignment", "gguf writer: general.alignment must be a uint32 set by the constructor");
    auto out = encoded(GgufValueType::INT32);
    put(out, v);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_u64(const std::string& key, std::uint64_t v) {
    AQPIM_CHECK(key != "general.alignment", "gguf writer: general.alignment must be a uint32 set by the constructor");
    auto out = encoded(GgufValueType::UINT64);
    put(out, v);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_f32(const std::string& key, float v) {
    auto out = encoded(GgufValueType::FLOAT32);
    put(out, v);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_bool(const std::string& key, bool v) {
    auto out = encoded(GgufValueType::BOOL);
    put<std::uint8_t>(out, v ? 1 : 0);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
    auto out = encoded_array(GgufValueType::STRING, v.size());
    for (const auto& s : v) put_string(out, s);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
    auto out = encoded_array(GgufValueType::FLOAT32, v.size());
    for (float x : v) put(out, x);
    set_encoded(key, std::move(out));
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<std::int32_t>& v) {
    auto out = encoded_array(GgufValueType::INT32, v.size());
    for (auto x : v) put(out, x);
    set_encoded(key, std::move(out));
}

// ---- tensors ------------------------------------------------------------------------------------

void GgufWriter::add_tensor(const std::string& name, const std::vector<std::int64_t>& ne, GgmlType type,
                            std::vector<std::uint8_t> data) {
    add_tensor(name, ne, type, RowGenerator([](std::int64_t, std::int64_t, std::uint8_t*) {}));  // validates
    Tensor& t = tensors_.back();
    if (data.size() != t.n_bytes) {
        const std::uint64_t needed = t.n_bytes;
        data_bytes_ = t.offset;
        tensors_.pop_back();
        AQPIM_FAIL("gguf writer: tensor '{}' has {} bytes, its shape and type {} need {}", name, data.size(),
                   ggml_type_name(type), needed);
    }
    auto bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(data));
    const std::size_t row_bytes = ggml_row_bytes(type, ne[0]);
    t.generate = [bytes, row_bytes](std::int64_t row0, std::int64_t n_rows, std::uint8_t* dst) {
        std::memcpy(dst, bytes->data() + std::size_t(row0) * row_bytes, std::size_t(n_rows) * row_bytes);
    };
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<std::int64_t>& ne, GgmlType type,
                            RowGenerator generate) {
    AQPIM_CHECK(!name.empty() && name.size() <= kMaxTensorName, "gguf writer: tensor name '{}' must have 1 to {} bytes",
                name, kMaxTensorName);
    for (const auto& t : tensors_) AQPIM_CHECK(t.name != name, "gguf writer: tensor '{}' added twice", name);
    AQPIM_CHECK(!ne.empty() && ne.size() <= 4, "gguf writer: tensor '{}' has {} dimensions (expected 1 to 4)", name,
                ne.size());
    constexpr std::uint64_t kMaxBytes = std::uint64_t(1) << 50;
    std::uint64_t n_rows = 1;
    for (std::size_t d = 0; d < ne.size(); ++d) {
        AQPIM_CHECK(ne[d] >= 1 && std::uint64_t(ne[d]) <= kMaxBytes,
                    "gguf writer: tensor '{}': ne[{}] = {} (expected 1 to 2^50)", name, d, ne[d]);
        if (d > 0) {
            AQPIM_CHECK(n_rows <= kMaxBytes / std::uint64_t(ne[d]), "gguf writer: tensor '{}' is absurdly large", name);
            n_rows *= std::uint64_t(ne[d]);
        }
    }
    const GgmlTypeTraits traits = ggml_type_traits(type);
    AQPIM_CHECK(traits.block_size > 0, "gguf writer: tensor '{}' has unknown {}", name, ggml_type_name(type));
    AQPIM_CHECK(ne[0] % traits.block_size == 0, "gguf writer: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}",
                name, ne[0], traits.name, traits.block_size);
    const std::uint64_t row_bytes = ggml_row_bytes(type, ne[0]);
    AQPIM_CHECK(n_rows <= kMaxBytes / row_bytes, "gguf writer: tensor '{}' is absurdly large", name);
    const std::uint64_t n_bytes = row_bytes * n_rows;
    AQPIM_CHECK(generate != nullptr, "gguf writer: tensor '{}' has no data", name);
    tensors_.push_back({name, ne, type, n_bytes, data_bytes_, std::move(generate)});
    data_bytes_ = round_up(data_bytes_ + n_bytes, alignment_);
}

// ---- writing ------------------------------------------------------------------------------------

std::vector<std::uint8_t> GgufWriter::header() const {
    std::vector<std::uint8_t> out = {'G', 'G', 'U', 'F'};
    put<std::uint32_t>(out, 3);
    put<std::uint64_t>(out, tensors_.size());
    put<std::uint64_t>(out, entries_.size());
    for (const auto& e : entries_) {
        put_string(out, e.key);
        out.insert(out.end(), e.value.begin(), e.value.end());
    }
    for (const auto& t : tensors_) {
        put_string(out, t.name);
        put<std::uint32_t>(out, std::uint32_t(t.ne.size()));
        for (auto d : t.ne) put<std::uint64_t>(out, std::uint64_t(d));
        put<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
        put<std::uint64_t>(out, t.offset);
    }
    out.resize(round_up(out.size(), alignment_), 0);
    return out;
}

std::uint64_t GgufWriter::file_bytes() const {
    std::uint64_t n = header().size() + data_bytes_;
    // the last tensor is not padded at the end of the file
    if (!tensors_.empty()) n -= data_bytes_ - (tensors_.back().offset + tensors_.back().n_bytes);
    return n;
}

void GgufWriter::write(const std::string& path) const {
    check_free_space(path, file_bytes(), "gguf writer: output");
    OutputFile file(path, "gguf writer: output");
    std::ostream& out = file.stream();
    auto put_bytes = [&](const std::uint8_t* p, std::size_t n) {
        out.write(reinterpret_cast<const char*>(p), std::streamsize(n));
        AQPIM_CHECK(out.good(), "gguf writer: writing '{}' failed: {}", path, std::strerror(errno));
    };
    const auto head = header();
    put_bytes(head.data(), head.size());
    std::vector<std::uint8_t> buf;
    std::uint64_t pos = 0;  // in the data section
    for (const auto& t : tensors_) {
        if (pos < t.offset) {
            const std::vector<std::uint8_t> pad(std::size_t(t.offset - pos), 0);
            put_bytes(pad.data(), pad.size());
            pos = t.offset;
        }
        const std::uint64_t row_bytes = ggml_row_bytes(t.type, t.ne[0]);
        const std::int64_t n_rows = std::int64_t(t.n_bytes / row_bytes);
        const std::int64_t chunk = std::max<std::int64_t>(1, std::int64_t(kChunkBytes / row_bytes));
        for (std::int64_t r = 0; r < n_rows; r += chunk) {
            const std::int64_t n = std::min(chunk, n_rows - r);
            buf.assign(std::size_t(n) * row_bytes, 0);
            t.generate(r, n, buf.data());
            put_bytes(buf.data(), buf.size());
        }
        pos += t.n_bytes;
    }
    file.commit();
}

}  // namespace aqpim
