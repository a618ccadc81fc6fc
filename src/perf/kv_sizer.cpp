// KvSizer: KV bytes from the cache's own accounting (include/aqpim/roofline.h).

#include "aqpim/error.h"
#include "aqpim/roofline.h"

namespace aqpim {

KvSizer::KvSizer(const KvShape& shape, const std::string& scheme, std::int64_t context)
    : shape_(shape), scheme_(scheme) {
    const KvSchemeSpec spec = parse_kv_scheme(scheme);
    KvCacheOptions options;
    options.context = context;
    cache_ = make_kv_cache(spec, shape, options);
    scheme_ = cache_->scheme();
}

double KvSizer::sequence_bytes(std::int64_t n) const {
    AQPIM_CHECK(n >= 1, "KV size of {} tokens: need at least 1", n);
    return double(cache_->sequence_bytes(n));
}

double KvSizer::bits_per_element(std::int64_t n) const {
    return sequence_bytes(n) * 8.0 / (double(n) * double(shape_.elements_per_token()));
}

}  // namespace aqpim
