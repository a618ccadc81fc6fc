// KvCache base pieces shared by every scheme.

#include "aqpim/kv_cache.h"

#include "aqpim/error.h"

namespace aqpim {

void KvMemory::add(const std::string& part, std::uint64_t n_bytes) {
    parts.emplace_back(part, n_bytes);
    bytes += n_bytes;
}

double KvMemory::bits_per_element(const KvShape& shape) const {
    if (n_tokens == 0) return 0.0;
    return double(bytes) * 8.0 / (double(n_tokens) * double(shape.elements_per_token()));
}

KvCache::KvCache(KvShape shape) : shape_(shape) {
    AQPIM_CHECK(shape.n_layer >= 1 && shape.n_kv_head >= 1 && shape.head_dim >= 1,
                "kv cache: shape n_layer={} n_kv_head={} head_dim={} must be positive", shape.n_layer,
                shape.n_kv_head, shape.head_dim);
}

std::uint64_t KvCache::sequence_bytes(std::int64_t) const {
    AQPIM_FAIL("kv cache {}: cannot size a sequence in advance", scheme());
}

void KvCache::save_sequence(int, ByteWriter&) const {
    AQPIM_FAIL("kv cache: scheme {} cannot save its state", scheme());
}

void KvCache::restore_sequence(int, ByteReader&) {
    AQPIM_FAIL("kv cache: scheme {} cannot restore a saved state", scheme());
}

}  // namespace aqpim
