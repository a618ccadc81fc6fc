// make_kv_cache: from a parsed --kv spec to a cache.

#include "aqpim/error.h"
#include "aqpim/kv_pq.h"
#include "aqpim/kv_scalar.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/kv_turbo.h"

namespace aqpim {

const std::vector<std::string>& kv_scheme_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n = {"f32", "f16"};
        for (const std::string& s : scalar_kv_scheme_names()) n.push_back(s);
        n.push_back("pq");
        for (const std::string& s : turbo_kv_scheme_names()) n.push_back(s);
        return n;
    }();
    return names;
}

std::unique_ptr<KvCache> make_kv_cache(const KvSchemeSpec& spec, const KvShape& shape, const KvCacheOptions& options) {
    if (spec.name == "f32" || spec.name == "f16") {
        spec.require_known_keys({});
        return make_dense_kv_cache(shape, spec.name == "f32" ? DenseKvType::f32 : DenseKvType::f16);
    }
    if (is_scalar_kv_scheme(spec.name)) return make_scalar_kv_cache(spec, shape, options);
    if (spec.name == "pq") return make_pq_kv_cache(spec, shape, options);
    if (is_turbo_kv_scheme(spec.name)) return make_turbo_kv_cache(spec, shape, options);
    std::string names;
    for (const std::string& n : kv_scheme_names()) names += (names.empty() ? "" : ", ") + n;
    AQPIM_FAIL("--kv {}: unknown KV cache scheme '{}' (available: {})", spec.text, spec.name, names);
}

std::unique_ptr<KvCache> make_kv_cache_like(const KvSchemeSpec& spec, const KvShape& shape,
                                            const KvCacheOptions& options, const KvCache& like, int seq_id) {
    if (spec.name == "pq") {
        const PqKvParams p = PqKvParams::from_spec(spec, shape, options.context);
        if (p.bits > 0) return make_pq_kv_cache(p, shape, options, pq_allocation(like, seq_id));
    }
    return make_kv_cache(spec, shape, options);
}

}  // namespace aqpim
