// make_scalar_kv_cache: from a parsed --kv spec to a row-quantized or KIVI cache.

#include <fmt/format.h>

#include <algorithm>

#include "aqpim/kv_scalar.h"
#include "kv/kivi_cache.h"
#include "kv/scalar_cache.h"
#include "kv/spec_params.h"

namespace aqpim {

int kv::int_param(const KvSchemeSpec& spec, const std::string& key, int fallback, std::int64_t lo, std::int64_t hi) {
    const std::int64_t x = spec.get_int(key, fallback);
    AQPIM_CHECK(x >= lo && x <= hi, "--kv {}: {}={} must be in {}..{}", spec.text, key, x, lo, hi);
    return int(x);
}

namespace {

using kv::int_param;

/// g: at least 1 and a divisor of head_dim.
int group_param(const KvSchemeSpec& spec, const KvShape& shape) {
    const int g = int_param(spec, "g", 32, 1, 1 << 20);
    AQPIM_CHECK(shape.head_dim % g == 0, "--kv {}: g={} does not divide head_dim {} (groups split a head row)",
                spec.text, g, shape.head_dim);
    return g;
}

}  // namespace

const std::vector<std::string>& scalar_kv_scheme_names() {
    static const std::vector<std::string> names = {"int8", "int4", "int", "q8_0", "q4_0", "kivi2"};
    return names;
}

bool is_scalar_kv_scheme(const std::string& name) {
    const auto& names = scalar_kv_scheme_names();
    return std::find(names.begin(), names.end(), name) != names.end();
}

std::unique_ptr<KvCache> make_scalar_kv_cache(const KvSchemeSpec& spec, const KvShape& shape,
                                              const KvCacheOptions& options) {
    const std::string& name = spec.name;
    if (name == "int8" || name == "int4" || name == "int") {
        spec.require_known_keys(name == "int" ? std::vector<std::string>{"bits", "g"} : std::vector<std::string>{"g"});
        const int bits = name == "int8" ? 8 : name == "int4" ? 4 : int_param(spec, "bits", 4, 1, 8);
        const int g = group_param(spec, shape);
        const std::string scheme =
            name == "int" ? fmt::format("int:bits={},g={}", bits, g) : fmt::format("{}:g={}", name, g);
        return kv::make_row_kv_cache(scheme, kv::RowCodec::affine_groups(shape.head_dim, bits, g), shape, options);
    }
    if (name == "q8_0" || name == "q4_0") {
        spec.require_known_keys({});
        AQPIM_CHECK(shape.head_dim % 32 == 0, "--kv {}: needs head_dim a multiple of 32 (blocks of 32 values), got {}",
                    spec.text, shape.head_dim);
        const GgmlType type = name == "q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_0;
        return kv::make_row_kv_cache(name, kv::RowCodec::ggml_blocks(shape.head_dim, type), shape, options);
    }
    if (name == "kivi2") {
        spec.require_known_keys({"g", "window"});
        kv::KiviParams p;
        p.bits = 2;
        p.g = group_param(spec, shape);
        p.window = int_param(spec, "window", 128, 0, 1 << 30);
        return kv::make_kivi_kv_cache(p, shape, options);
    }
    std::string names;
    for (const std::string& n : scalar_kv_scheme_names()) names += (names.empty() ? "" : ", ") + n;
    AQPIM_FAIL("--kv {}: '{}' is not a scalar KV scheme ({})", spec.text, name, names);
}

}  // namespace aqpim
