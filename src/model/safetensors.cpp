#include "aqpim/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/half.h"

namespace aqpim {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t(100) << 20;  // as the reference implementation

int dtype_bytes(const std::string& d) {
    if (d == "F64" || d == "I64" || d == "U64") return 8;
    if (d == "F32" || d == "I32" || d == "U32") return 4;
    if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
    if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
    return 0;
}

TensorDType dtype_of(const std::string& d) {
    if (d == "F32") return TensorDType::f32;
    if (d == "F16") return TensorDType::f16;
    if (d == "BF16") return TensorDType::bf16;
    return TensorDType::other;
}

}  // namespace

std::int64_t SafetensorInfo::n_elements() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
    const std::uint64_t size = file_.size();
    AQPIM_CHECK(size >= 8, "{}: file of {} bytes is too short for a safetensors header", path, size);
    std::uint64_t header_len = 0;
    std::memcpy(&header_len, file_.data(), 8);
    AQPIM_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the {} byte limit", path, header_len,
                kMaxHeaderBytes);
    AQPIM_CHECK(header_len <= size - 8, "{}: header length {} runs past the end of the file ({} bytes)", path,
                header_len, size);
    data_start_ = 8 + header_len;
    const std::uint64_t data_size = size - data_start_;
    const nlohmann::json header = parse_json(
        std::string_view(reinterpret_cast<const char*>(file_.data()) + 8, std::size_t(header_len)), path + ": header");
    AQPIM_CHECK(header.is_object(), "{}: header is not a JSON object", path);
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const std::string& name = it.key();
        const auto& t = it.value();
        AQPIM_CHECK(t.is_object(), "{}: tensor '{}' is not an object", path, name);
        AQPIM_CHECK(t.contains("dtype") && t["dtype"].is_string(), "{}: tensor '{}' has no dtype string", path, name);
        AQPIM_CHECK(t.contains("shape") && t["shape"].is_array(), "{}: tensor '{}' has no shape array", path, name);
        AQPIM_CHECK(t.contains("data_offsets") && t["data_offsets"].is_array() && t["data_offsets"].size() == 2,
                    "{}: tensor '{}' has no [begin, end] data_offsets", path, name);
        SafetensorInfo info;
        info.dtype_name = t["dtype"].get<std::string>();
        info.dtype = dtype_of(info.dtype_name);
        const int eb = dtype_bytes(info.dtype_name);
        AQPIM_CHECK(eb > 0, "{}: tensor '{}' has unknown dtype '{}'", path, name, info.dtype_name);
        std::uint64_t n = 1;
        for (const auto& d : t["shape"]) {
            AQPIM_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<std::int64_t>() >= 0),
                        "{}: tensor '{}' has a bad dimension {}", path, name, json_excerpt(d));
            const std::uint64_t v = d.get<std::uint64_t>();
            AQPIM_CHECK(v <= (std::uint64_t(1) << 40) && (v == 0 || n <= (std::uint64_t(1) << 50) / v),
                        "{}: tensor '{}' shape {} is absurdly large", path, name, json_excerpt(t["shape"]));
            n *= v;
            info.shape.push_back(std::int64_t(v));
        }
        for (const auto& o : t["data_offsets"])
            AQPIM_CHECK(o.is_number_unsigned(), "{}: tensor '{}' has a bad data offset {}", path, name, json_excerpt(o));
        info.begin = t["data_offsets"][0].get<std::uint64_t>();
        const std::uint64_t end = t["data_offsets"][1].get<std::uint64_t>();
        AQPIM_CHECK(info.begin <= end && end <= data_size,
                    "{}: tensor '{}' data_offsets [{}, {}] fall outside the {} data bytes", path, name, info.begin,
                    end, data_size);
        info.n_bytes = end - info.begin;
        AQPIM_CHECK(info.n_bytes == n * std::uint64_t(eb),
                    "{}: tensor '{}' has {} bytes but shape {} of {} needs {}", path, name, info.n_bytes,
                    json_excerpt(t["shape"]), info.dtype_name, n * eb);
        tensors_.emplace(name, std::move(info));
    }
    // Tensors may not share bytes (the format lays them out one after another).
    std::vector<std::pair<std::uint64_t, const std::string*>> by_begin;
    for (const auto& [name, t] : tensors_)
        if (t.n_bytes > 0) by_begin.emplace_back(t.begin, &name);
    std::sort(by_begin.begin(), by_begin.end());
    for (std::size_t i = 1; i < by_begin.size(); ++i) {
        const SafetensorInfo& prev = tensors_.at(*by_begin[i - 1].second);
        AQPIM_CHECK(by_begin[i].first >= prev.begin + prev.n_bytes,
                    "{}: tensors '{}' and '{}' overlap in the data (data_offsets [{}, {}] and from {})", path,
                    *by_begin[i - 1].second, *by_begin[i].second, prev.begin, prev.begin + prev.n_bytes,
                    by_begin[i].first);
    }
}

const SafetensorInfo& SafetensorsFile::info(const std::string& name) const {
    auto it = tensors_.find(name);
    AQPIM_CHECK(it != tensors_.end(), "{}: no tensor named '{}'", file_.path(), name);
    return it->second;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name, const std::vector<std::int64_t>& expected) const {
    const SafetensorInfo& t = info(name);
    AQPIM_CHECK(t.shape == expected, "{}: tensor '{}' has shape [{}], expected [{}]", file_.path(), name,
                fmt::join(t.shape, ", "), fmt::join(expected, ", "));
    const std::uint8_t* src = file_.data() + data_start_ + t.begin;
    std::vector<float> out(std::size_t(t.n_elements()));
    switch (t.dtype) {
        case TensorDType::f32: std::memcpy(out.data(), src, t.n_bytes); break;
        case TensorDType::f16: {
            std::vector<f16_t> tmp(out.size());
            std::memcpy(tmp.data(), src, t.n_bytes);
            fp16_to_f32(tmp.data(), out.data(), out.size());
            break;
        }
        case TensorDType::bf16: {
            std::vector<bf16_t> tmp(out.size());
            std::memcpy(tmp.data(), src, t.n_bytes);
            bf16_to_f32(tmp.data(), out.data(), out.size());
            break;
        }
        default: AQPIM_FAIL("{}: tensor '{}' has dtype {} (supported: F32, F16, BF16)", file_.path(), name, t.dtype_name);
    }
    return out;
}

}  // namespace aqpim
