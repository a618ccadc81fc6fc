#pragma once
// safetensors reader (Hugging Face): 8-byte little-endian header length, a JSON header mapping
// tensor names to {dtype, shape, data_offsets}, then the data. Every field is validated against
// the file before use; a truncated, corrupted or hostile file gives an aqpim::Error naming the
// field, never an out-of-bounds read.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "aqpim/mapped_file.h"

namespace aqpim {

enum class TensorDType { f32, f16, bf16, other };

struct SafetensorInfo {
    std::string dtype_name;        ///< as written in the file ("F16", "I64", ...)
    TensorDType dtype = TensorDType::other;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;       ///< byte offset from the start of the data section
    std::uint64_t n_bytes = 0;
    std::int64_t n_elements() const;
};

class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);

    const std::string& path() const { return file_.path(); }
    bool has(const std::string& name) const { return tensors_.count(name) != 0; }
    /// Throws aqpim::Error naming the tensor and the file if absent.
    const SafetensorInfo& info(const std::string& name) const;
    const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
    /// The tensor converted to f32 (F32, F16, BF16; any other dtype is an error naming it), checked
    /// against the expected shape.
    std::vector<float> read_f32(const std::string& name, const std::vector<std::int64_t>& expected_shape) const;
    /// The tensor's raw bytes inside the mapping (info.n_bytes of them, valid while this object
    /// lives; not necessarily aligned to the element size).
    const std::uint8_t* tensor_data(const SafetensorInfo& info) const { return file_.data() + data_start_ + info.begin; }

private:
    MappedFile file_;
    std::uint64_t data_start_ = 0;
    std::map<std::string, SafetensorInfo> tensors_;
};

}  // namespace aqpim
