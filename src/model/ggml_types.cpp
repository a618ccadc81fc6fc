#include "aqpim/ggml_types.h"

#include <fmt/format.h>

#include <cctype>
#include <limits>

#include "aqpim/error.h"

namespace aqpim {

namespace {

// Block layouts as llama.cpp's ggml-common.h defines them (QK_K = 256). Ids missing here (4, 5,
// 31-33, 36-38: types llama.cpp removed) are unknown.
GgmlTypeTraits traits_of(std::uint32_t id) {
    switch (id) {
        case 0: return {"F32", 1, 4, true};
        case 1: return {"F16", 1, 2, true};
        case 2: return {"Q4_0", 32, 18, true};
        case 3: return {"Q4_1", 32, 20, false};
        case 6: return {"Q5_0", 32, 22, false};
        case 7: return {"Q5_1", 32, 24, false};
        case 8: return {"Q8_0", 32, 34, true};
        case 9: return {"Q8_1", 32, 36, false};
        case 10: return {"Q2_K", 256, 84, false};
        case 11: return {"Q3_K", 256, 110, false};
        case 12: return {"Q4_K", 256, 144, true};
        case 13: return {"Q5_K", 256, 176, false};
        case 14: return {"Q6_K", 256, 210, true};
        case 15: return {"Q8_K", 256, 292, false};
        case 16: return {"IQ2_XXS", 256, 66, false};
        case 17: return {"IQ2_XS", 256, 74, false};
        case 18: return {"IQ3_XXS", 256, 98, false};
        case 19: return {"IQ1_S", 256, 50, false};
        case 20: return {"IQ4_NL", 32, 18, false};
        case 21: return {"IQ3_S", 256, 110, false};
        case 22: return {"IQ2_S", 256, 82, false};
        case 23: return {"IQ4_XS", 256, 136, false};
        case 24: return {"I8", 1, 1, false};
        case 25: return {"I16", 1, 2, false};
        case 26: return {"I32", 1, 4, false};
        case 27: return {"I64", 1, 8, false};
        case 28: return {"F64", 1, 8, false};
        case 29: return {"IQ1_M", 256, 56, false};
        case 30: return {"BF16", 1, 2, true};
        case 34: return {"TQ1_0", 256, 54, false};
        case 35: return {"TQ2_0", 256, 66, false};
        case 39: return {"MXFP4", 32, 17, false};  // newer than the enum; named for error messages
        default: return {};
    }
}

}  // namespace

GgmlTypeTraits ggml_type_traits(GgmlType type) { return traits_of(static_cast<std::uint32_t>(type)); }

std::string ggml_type_name(GgmlType type) {
    const GgmlTypeTraits t = ggml_type_traits(type);
    if (t.block_size == 0) return fmt::format("type {}", static_cast<std::uint32_t>(type));
    return t.name;
}

std::size_t ggml_row_bytes(GgmlType type, std::int64_t n) {
    const GgmlTypeTraits t = ggml_type_traits(type);
    AQPIM_CHECK(t.block_size > 0, "unknown tensor {}", ggml_type_name(type));
    AQPIM_CHECK(n >= 0 && n % t.block_size == 0, "a row of {} values is not a whole number of {} blocks ({} values)",
                n, t.name, t.block_size);
    const std::uint64_t blocks = std::uint64_t(n / t.block_size);
    AQPIM_CHECK(blocks <= std::numeric_limits<std::uint64_t>::max() / std::uint64_t(t.block_bytes),
                "a row of {} {} values overflows a byte count", n, t.name);
    return std::size_t(blocks * std::uint64_t(t.block_bytes));
}

void require_supported_type(GgmlType type, const std::string& what) {
    if (ggml_type_traits(type).supported) return;
    std::string list;
    for (std::uint32_t id = 0; id < 64; ++id) {
        const GgmlTypeTraits t = traits_of(id);
        if (!t.supported) continue;
        if (!list.empty()) list += ", ";
        list += t.name;
    }
    AQPIM_FAIL("{}: tensor type {} is not supported (supported: {})", what, ggml_type_name(type), list);
}

GgmlType ggml_type_named(const std::string& name, std::initializer_list<GgmlType> choices, const std::string& what) {
    std::string list;
    for (GgmlType t : choices) {
        std::string lower = ggml_type_name(t);
        for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        if (lower == name) return t;
        list += (list.empty() ? "" : ", ") + lower;
    }
    AQPIM_FAIL("{} '{}' is not one of {}", what, name, list);
}

std::uint32_t llama_file_type(GgmlType t) {
    switch (t) {
        case GgmlType::F32: return 0;    // ALL_F32
        case GgmlType::F16: return 1;    // MOSTLY_F16
        case GgmlType::Q4_0: return 2;
        case GgmlType::Q4_1: return 3;
        case GgmlType::Q8_0: return 7;
        case GgmlType::Q5_0: return 8;
        case GgmlType::Q5_1: return 9;
        case GgmlType::Q2_K: return 10;
        case GgmlType::Q3_K: return 12;  // Q3_K_M
        case GgmlType::Q4_K: return 15;  // Q4_K_M
        case GgmlType::Q5_K: return 17;  // Q5_K_M
        case GgmlType::Q6_K: return 18;
        case GgmlType::BF16: return 32;  // MOSTLY_BF16
        default: return 0;
    }
}

}  // namespace aqpim
