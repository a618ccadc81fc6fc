#pragma once
// GGUF (llama.cpp's model file), versions 2 and 3, read through mmap and written for `synth` and
// `convert`. Layout: magic "GGUF", u32 version, u64 tensor count, u64 metadata count, metadata
// key/value pairs, tensor infos (name, n_dims, ne[], type, offset), padding to general.alignment
// (default 32), tensor data. Every count, length, offset and dimension is validated against the
// file before use: a truncated, corrupted or hostile file gives an aqpim::Error naming the field.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "aqpim/ggml_types.h"
#include "aqpim/mapped_file.h"

namespace aqpim {

enum class GgufValueType : std::uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

/// One metadata value. Scalars keep their GGUF type; arrays are stored decoded.
struct GgufValue {
    GgufValueType type = GgufValueType::UINT8;
    GgufValueType array_type = GgufValueType::UINT8;  ///< element type when type == ARRAY
    std::variant<std::uint64_t, std::int64_t, double, bool, std::string,
                 std::vector<std::int64_t>, std::vector<double>, std::vector<std::string>> value;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<std::int64_t> ne;  ///< ne[0] is the contiguous dimension (GGUF order)
    GgmlType type = GgmlType::F32;
    std::uint64_t offset = 0;      ///< from the start of the data section
    std::uint64_t n_bytes = 0;
    std::int64_t n_elements() const;
};

class GgufFile {
public:
    explicit GgufFile(const std::string& path);

    const std::string& path() const { return path_; }
    std::uint32_t version() const { return version_; }

    bool has(const std::string& key) const { return kv_.count(key) != 0; }
    const std::map<std::string, GgufValue>& metadata() const { return kv_; }
    /// Typed getters: a missing key or a value of another kind is an error naming the key. Integer
    /// getters accept every integer type and check the range; float getters accept f32/f64.
    std::string get_string(const std::string& key) const;
    std::int64_t get_int(const std::string& key) const;
    double get_float(const std::string& key) const;
    bool get_bool(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<std::int64_t> get_int_array(const std::string& key) const;
    std::vector<double> get_float_array(const std::string& key) const;
    std::optional<std::int64_t> find_int(const std::string& key) const;
    std::optional<double> find_float(const std::string& key) const;
    std::optional<std::string> find_string(const std::string& key) const;
    std::optional<bool> find_bool(const std::string& key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(const std::string& name) const;
    /// Throws aqpim::Error naming the tensor and the file if absent.
    const GgufTensorInfo& tensor(const std::string& name) const;
    /// Start of a tensor's bytes inside the mapping (valid while this object lives).
    const std::uint8_t* tensor_data(const GgufTensorInfo& info) const;

private:
    std::string path_;
    std::shared_ptr<MappedFile> file_;
    std::uint32_t version_ = 0;
    std::uint64_t data_start_ = 0;
    std::map<std::string, GgufValue> kv_;
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, std::size_t> tensor_index_;
};

/// Builds a GGUF v3 file: metadata in insertion order, then tensors aligned to `alignment`.
class GgufWriter {
public:
    explicit GgufWriter(std::uint32_t alignment = 32);

    void set_string(const std::string& key, const std::string& v);
    void set_u32(const std::string& key, std::uint32_t v);
    void set_i32(const std::string& key, std::int32_t v);
    void set_u64(const std::string& key, std::uint64_t v);
    void set_f32(const std::string& key, float v);
    void set_bool(const std::string& key, bool v);
    void set_string_array(const std::string& key, const std::vector<std::string>& v);
    void set_f32_array(const std::string& key, const std::vector<float>& v);
    void set_i32_array(const std::string& key, const std::vector<std::int32_t>& v);

    /// Add a tensor; `data` holds exactly ggml_row_bytes(type, ne[0]) * prod(ne[1:]) bytes.
    void add_tensor(const std::string& name, const std::vector<std::int64_t>& ne, GgmlType type,
                    std::vector<std::uint8_t> data);

    /// Writes rows [row0, row0 + n_rows) of a tensor into dst (a row is ne[0] values, i.e.
    /// ggml_row_bytes(type, ne[0]) bytes; there are prod(ne[1:]) rows). Called during write(),
    /// in row order, with chunks of a few MB, so a tensor never has to be held whole in memory.
    using RowGenerator = std::function<void(std::int64_t row0, std::int64_t n_rows, std::uint8_t* dst)>;
    /// Add a tensor whose bytes are produced while writing (streaming: `synth` of an 8B model).
    void add_tensor(const std::string& name, const std::vector<std::int64_t>& ne, GgmlType type,
                    RowGenerator generate);

    /// Bytes the file will have (header, metadata, tensor infos, padding, data).
    std::uint64_t file_bytes() const;

    /// Write to path (via a temporary file renamed at the end, so a failure never leaves a
    /// half-written model under the final name).
    void write(const std::string& path) const;

private:
    struct Entry {
        std::string key;
        std::vector<std::uint8_t> value;  ///< encoded: u32 value type, then the value
    };
    struct Tensor {
        std::string name;
        std::vector<std::int64_t> ne;
        GgmlType type;
        std::uint64_t n_bytes;
        std::uint64_t offset;  ///< in the data section, aligned
        RowGenerator generate;
    };
    void set_encoded(const std::string& key, std::vector<std::uint8_t> value);
    std::vector<std::uint8_t> header() const;  ///< everything before the data section, padded

    std::uint32_t alignment_;
    std::vector<Entry> entries_;  ///< insertion order; setting a key again replaces it in place
    std::vector<Tensor> tensors_;
    std::uint64_t data_bytes_ = 0;  ///< data section so far (aligned)
};

}  // namespace aqpim
