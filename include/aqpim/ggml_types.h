#pragma once
// Tensor element types as GGUF/ggml number them. aqpim computes with F32, F16, BF16, Q8_0, Q4_0,
// Q4_K and Q6_K (the types inside common Q4_K_M files); any other id is recognised by name only so
// that errors can say what the file contains.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace aqpim {

enum class GgmlType : std::uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35,
};

/// Layout of one type: `block_size` values are stored in `block_bytes` bytes.
struct GgmlTypeTraits {
    const char* name = "unknown";
    int block_size = 0;      ///< 0: unknown type id
    int block_bytes = 0;
    bool supported = false;  ///< aqpim can dequantize / multiply it
};

/// Traits of a type id (an unknown id gives block_size 0 and name "unknown").
GgmlTypeTraits ggml_type_traits(GgmlType type);
/// "Q4_K", or "type 99" for an unknown id.
std::string ggml_type_name(GgmlType type);
/// Bytes of a row of n values; throws aqpim::Error if the type is unknown or n is not a multiple
/// of its block size.
std::size_t ggml_row_bytes(GgmlType type, std::int64_t n);
/// The type among `choices` whose name in lower case (ggml_type_name: "q4_k") is `name`; else an
/// aqpim::Error "<what> '<name>' is not one of f32, ..." (the choices, in order).
GgmlType ggml_type_named(const std::string& name, std::initializer_list<GgmlType> choices, const std::string& what);
/// llama.cpp's `general.file_type` (enum llama_ftype) for a file whose matrices are mostly of type
/// t (Q4_K: MOSTLY_Q4_K_M, Q3_K / Q5_K likewise _M; 0 for a type with no file type of its own).
std::uint32_t llama_file_type(GgmlType t);
/// Throws aqpim::Error("<what>: tensor type X is not supported (supported: F32, F16, ...)") unless
/// the type is one aqpim computes with.
void require_supported_type(GgmlType type, const std::string& what);

}  // namespace aqpim
