// Helpers of the caches' state sections (kv/kv_state_io.h).

#include "kv/kv_state_io.h"

#include <cmath>

#include "aqpim/error.h"
#include "aqpim/model.h"

namespace aqpim::kv {

void write_layer_counts(ByteWriter& out, const KvCache& cache, int seq_id) {
    for (int il = 0; il < cache.shape().n_layer; ++il) out.u64(std::uint64_t(cache.n_tokens(seq_id, il)));
}

std::vector<std::int64_t> read_layer_counts(ByteReader& in, const KvShape& shape) {
    in.require(std::uint64_t(shape.n_layer), 8, "layer token counts");
    std::vector<std::int64_t> n(std::size_t(shape.n_layer));
    for (int il = 0; il < shape.n_layer; ++il) {
        const std::uint64_t v = in.u64("layer token count");
        if (v > std::uint64_t(ModelLimits::context))
            in.fail(fmt::format("layer {} holds {} tokens, more than the {} a sequence may", il, v, ModelLimits::context));
        n[std::size_t(il)] = std::int64_t(v);
    }
    return n;
}

void check_new_sequence(const KvCache& cache, int seq_id) {
    AQPIM_CHECK(seq_id >= 0, "kv cache {}: sequence id {} must be non-negative", cache.scheme(), seq_id);
    AQPIM_CHECK(!cache.has_sequence(seq_id), "kv cache {}: sequence {} already exists", cache.scheme(), seq_id);
}

void read_finite_f16(ByteReader& in, f16_t* out, std::uint64_t n, std::string_view field) {
    in.u16s(out, n, field);
    for (std::uint64_t i = 0; i < n; ++i)
        if ((out[i] & 0x7c00u) == 0x7c00u)  // exponent all ones: inf or NaN
            in.fail(fmt::format("'{}' value {} is {} (f16 bits {:#06x}), not finite", field, i,
                                fp16_to_f32_scalar(out[i]), out[i]));
}

void read_finite_f32(ByteReader& in, float* out, std::uint64_t n, std::string_view field) {
    in.f32s(out, n, field);
    for (std::uint64_t i = 0; i < n; ++i)
        if (!std::isfinite(out[i])) in.fail(fmt::format("'{}' value {} is {}, not finite", field, i, out[i]));
}

}  // namespace aqpim::kv
