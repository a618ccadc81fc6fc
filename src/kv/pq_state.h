#pragma once
// The PQ cache's pieces of a KV state (docs/kv-state.md, section "pq"): codebook versions as the
// cache keeps them, and the check that restored code blocks are what encoding leaves.

#include <cstdint>
#include <span>
#include <string_view>

#include "aqpim/byte_io.h"
#include "kv/pq_codebooks.h"

namespace aqpim::kv {

/// Head ih's key or value quantizer of `version`: u32 flags (bit 0: a permutation follows), the
/// centroids [M][ksub][dsub] (f32, or f16 bits with cb=f16), then as the parameters have them: the
/// scale [D] f32 (scale folding), the permutation [D] i32 (flag), the Hadamard signs [D] f32, the
/// rotation [D][D] f32. The parameters themselves are the scheme's (pq_key_params /
/// pq_value_params with the head's M), not stored.
void write_pq_quantizer(ByteWriter& out, const PqLayerVersion& version, bool value, int ih);

/// One codebook version of a layer: the quantizers of every KV head, keys (Mk[ih] subspaces) then
/// values (Mv[ih]) per head, checked as ProductQuantizer::load checks its parts, kept as the cache
/// keeps them (PqLayerVersion::keep_counted_only).
PqLayerVersion read_pq_version(ByteReader& in, const PqKvParams& p, const KvShape& shape, std::span<const int> Mk,
                               std::span<const int> Mv, std::string_view field);

/// True when code blocks of n tokens ([code_blocks_for(n)][code_block_bytes(M, nbits)]) are what
/// encoding leaves: codes of padding tokens and of padding subspaces zero.
bool code_blocks_canonical(const std::uint8_t* blocks, std::int64_t n, int M, int nbits);

}  // namespace aqpim::kv
