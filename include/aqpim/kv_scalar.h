#pragma once
// The scalar KV-cache baselines adaptive PQ is compared against (formats in docs/kv-scalar.md):
//
//   int8[:g=32], int4[:g=32]   per-token group-wise asymmetric: each token's head row split in groups
//   int[:bits=4,g=32]          of g values, each group with an f16 scale and an f16 min
//                              (x ~ min + scale * q, q in [0, 2^bits - 1]); int8 / int4 are int with
//                              bits 8 / 4, `int` takes any bits in 1..8
//   q8_0, q4_0                 llama.cpp's blocks along the head row (32 values + f16 scale), coded by
//                              the weight quantizers (aqpim::quantize), byte-identical to llama.cpp
//   kivi2[:g=32,window=128]    KIVI 2-bit: keys per channel over groups of g tokens, values per token in
//                              groups of g channels, both asymmetric with f16 scale and min; the most
//                              recent tokens stay f16 (rule in docs/kv-scalar.md)
//
// Every cache honours KvCacheOptions::memory_budget: an append whose result would hold more bytes
// (as memory() counts them) throws aqpim::Error naming the budget and the need, and changes nothing.

#include <memory>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"

namespace aqpim {

/// True for the scheme names make_scalar_kv_cache builds ("int8", "int4", "int", "q8_0", "q4_0", "kivi2").
bool is_scalar_kv_scheme(const std::string& name);
/// Those names, in help order.
const std::vector<std::string>& scalar_kv_scheme_names();

/// The cache a scalar spec names. Unknown name or parameter, g not dividing head_dim, g <= 0, bits out
/// of 1..8, head_dim not a multiple of 32 for q8_0/q4_0, negative window: aqpim::Error.
std::unique_ptr<KvCache> make_scalar_kv_cache(const KvSchemeSpec& spec, const KvShape& shape,
                                              const KvCacheOptions& options = {});

}  // namespace aqpim
