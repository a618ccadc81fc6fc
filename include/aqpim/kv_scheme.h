#pragma once
// KV cache schemes as users name them (`--kv`): NAME[:key=value,...]; several schemes separated by
// ';'; lists inside a value use '+' and ranges 'a-b' (f16_layers=0+1+4-7).
//
//   f32, f16                          dense reference
//   int8[:g=32], int4[:g=32]          per-token group-wise scalar quantization
//   q8_0, q4_0                        llama.cpp blocks (32 values + f16 scale)
//   kivi2[:g=32,window=128]           KIVI: keys per-channel, values per-token, f16 residual window
//   pq[:m=32,nbits=4,calib=256,...]   adaptive product quantization (see docs/kv-pq.md)
//   turbo[:bits=3.5,qjl=0,...]        TurboQuant: random rotation + Lloyd-Max codes (docs/kv-baselines.md)
//   qjl[:m=256,values=int2,...]       QJL keys: 1-bit JL sketch + norm; per-token values (docs/kv-baselines.md)

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"

namespace aqpim {

struct KvSchemeSpec {
    std::string name;                           ///< "pq", "int8", ...
    std::map<std::string, std::string> params;  ///< key -> value as written
    std::string text;                           ///< the spec as written (for reports)

    /// Typed access; a value that does not parse is an error naming the scheme and the key.
    bool has(const std::string& key) const { return params.count(key) != 0; }
    std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
    double get_float(const std::string& key, double fallback) const;
    /// "0+1+4-7" -> {0, 1, 4, 5, 6, 7}; empty when absent.
    std::vector<int> get_int_list(const std::string& key) const;
    /// Throws aqpim::Error naming the first key not in `known` (catches typos like "wndow").
    void require_known_keys(const std::vector<std::string>& known) const;
};

/// Parse one scheme ("pq:m=32,bits=2"); malformed text is an error quoting it.
KvSchemeSpec parse_kv_scheme(const std::string& text);
/// Parse ';'-separated schemes; empty entries are skipped, none at all is an error.
std::vector<KvSchemeSpec> parse_kv_schemes(const std::string& text);

/// Run-level settings shared by every scheme.
struct KvCacheOptions {
    std::uint64_t memory_budget = 0;  ///< bytes the cache may hold (0 = unlimited); beyond it append() refuses
    std::int64_t context = 0;         ///< the context length reports state bits/element at (0 = as stored)
};

/// The cache a spec names, for a model's KV shape. Unknown scheme or parameter: aqpim::Error.
std::unique_ptr<KvCache> make_kv_cache(const KvSchemeSpec& spec, const KvShape& shape, const KvCacheOptions& options = {});

/// A cache of `spec` that makes the data-dependent choices `like` (a cache of the same spec) made for
/// sequence `seq_id`, so that runs over other values hold the same bytes: for `pq` with bits= the m
/// of every layer (make_pq_kv_cache with pq_allocation); every other scheme chooses nothing from its
/// data and is made as make_kv_cache makes it. The attention-weight probes of `eval --fidelity` and
/// the two value patterns of `eval --needles` use it.
std::unique_ptr<KvCache> make_kv_cache_like(const KvSchemeSpec& spec, const KvShape& shape,
                                            const KvCacheOptions& options, const KvCache& like, int seq_id);

/// Names of every scheme, for help texts and errors.
const std::vector<std::string>& kv_scheme_names();

}  // namespace aqpim
