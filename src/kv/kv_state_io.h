#pragma once
// What the caches' save_sequence / restore_sequence share (their sections: docs/kv-state.md).

#include <cstdint>
#include <string_view>
#include <vector>

#include "aqpim/byte_io.h"
#include "aqpim/half.h"
#include "aqpim/kv_cache.h"

namespace aqpim::kv {

/// Every scheme's section starts with u64 n_tokens[n_layer]: the tokens each layer holds.
void write_layer_counts(ByteWriter& out, const KvCache& cache, int seq_id);
/// Each count at most ModelLimits::context, else an error naming the layer.
std::vector<std::int64_t> read_layer_counts(ByteReader& in, const KvShape& shape);

/// Before a restore: seq_id non-negative and not in use (aqpim::Error naming the scheme otherwise).
void check_new_sequence(const KvCache& cache, int seq_id);

/// n values, each finite (what append stores): an error naming the field and the value otherwise.
/// `out` has room for n (size it after ByteReader::require).
void read_finite_f16(ByteReader& in, f16_t* out, std::uint64_t n, std::string_view field);
void read_finite_f32(ByteReader& in, float* out, std::uint64_t n, std::string_view field);

}  // namespace aqpim::kv
