#pragma once
// The state of one sequence, saved to bytes or a file and restored (format: docs/kv-state.md): the
// cache's own bytes for the sequence (KvCache::save_sequence: a PQ sequence's codes, every codebook
// version, its f16 sinks and tail, its place in the schedule), and beside them what a server slot
// needs to continue exactly: the token ids, the sampler's state, the identity of the model, the
// scheme and the context the cache was built with. Restoring and continuing gives the tokens an
// uninterrupted run gives.
//
// The bytes are independent of the process (no pointers, page ids or host byte order: every field
// little-endian), versioned, checksummed (XXH64), in sections with lengths so a reader skips what it
// does not know. Reading is safe on untrusted bytes: every size is checked against the shape and the
// bytes left before anything is allocated; truncated, corrupted or foreign states (another model,
// shape or scheme) are an aqpim::Error naming what is wrong, and the cache is left as it was.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/sampler.h"

namespace aqpim {

struct ModelWeights;

/// Which model a state belongs to.
struct ModelIdentity {
    /// XXH64 over the configuration's numbers and every weight's type, shape and bytes (the name and
    /// file format excluded: the same weights from GGUF and safetensors with the same RoPE layout
    /// compute the same KV). docs/kv-state.md lists the bytes hashed.
    std::uint64_t fingerprint = 0;
    std::string name;  ///< ModelConfig::name, for messages
};

/// The identity of a model: reads every weight byte once (XXH64, a few GB/s on one core: a 7B f16
/// model takes seconds, so a server computes it once at start).
ModelIdentity model_identity(const ModelWeights& weights);

/// What continuing a sequence needs beside its KV: with the cache sequence, a server slot.
struct SlotState {
    std::vector<std::int32_t> tokens;     ///< every token of the sequence, prompt first (may be empty: a
                                          ///< cache used without a model)
    std::int64_t n_cached = 0;            ///< tokens[0, n_cached) are in the cache; the rest are fed next
    std::optional<SamplerState> sampler;  ///< the sampler to continue with (absent: none kept)
};

/// A state's header fields, parsed and checked (checksum included) without a cache.
struct KvStateInfo {
    std::uint32_t version = 0;  ///< format version
    ModelIdentity model;
    KvShape shape;              ///< n_layer, n_kv_head, head_dim, rope_pairs (no RoPE frequencies)
    std::string scheme;         ///< KvCache::scheme() of the cache that saved it
    std::int64_t context = 0;   ///< KvCacheOptions::context that cache was built with
    SlotState slot;
    std::uint64_t cache_offset = 0, cache_bytes = 0;  ///< where the cache's own bytes (KVSQ payload) lie
};

// ---- save ---------------------------------------------------------------------------------------

/// The state of sequence seq_id. Every layer must hold slot.n_cached tokens (save between forward
/// steps) and slot.tokens must be empty or hold at least those; `context` is the
/// KvCacheOptions::context the cache was built with (a PQ cache with bits= or RoPE augmentation
/// codes by it; restoring rebuilds the cache with it). Throws aqpim::Error for a scheme that cannot
/// save (KvCache::save_sequence) or a slot that does not match the cache.
std::vector<std::uint8_t> save_kv_state(const KvCache& cache, int seq_id, const SlotState& slot,
                                        const ModelIdentity& model, std::int64_t context = 0);
/// The same, written to `path` through OutputFile (complete or not at all).
void save_kv_state_file(const std::string& path, const KvCache& cache, int seq_id, const SlotState& slot,
                        const ModelIdentity& model, std::int64_t context = 0);

// ---- restore ------------------------------------------------------------------------------------

/// What restore_kv_state checks of a state (read_kv_state_info) before it reads the cache's bytes:
/// saved for `model`, from a cache of `cache`'s shape and scheme (aqpim::Error naming the
/// difference). A caller that must give something up for a restore's room checks this first.
void check_kv_state_target(const KvStateInfo& info, const KvCache& cache, const ModelIdentity& model);

/// Check and parse everything but the cache's bytes: magic, version, size, checksum, sections.
KvStateInfo read_kv_state_info(std::span<const std::uint8_t> bytes);

/// Restore a state into sequence seq_id (not in use) of `cache`, which must have the state's shape
/// and scheme; the state must be `model`'s. Returns the slot (tokens, n_cached, sampler). On any
/// error the cache is as it was.
SlotState restore_kv_state(std::span<const std::uint8_t> bytes, KvCache& cache, int seq_id, const ModelIdentity& model);

/// What a state is restored for when the caller has no cache yet.
struct KvStateTarget {
    const ModelIdentity* model = nullptr;  ///< the state must be this model's (null: not checked)
    /// The model's KV shape with its RoPE frequencies; it must equal the state's (null: the state's
    /// own shape, without frequencies: inspection and fuzzing).
    const KvShape* shape = nullptr;
    std::uint64_t memory_budget = 0;       ///< of the cache built (0: none)
};
struct RestoredKvState {
    std::unique_ptr<KvCache> cache;  ///< built from the state's scheme and context, holding sequence 0
    KvStateInfo info;                ///< info.slot: tokens, n_cached, sampler
};
/// The single entry point from bytes: parse, build the cache the state names, restore it as
/// sequence 0. Any input gives a RestoredKvState or an aqpim::Error (fuzz this).
RestoredKvState load_kv_state(std::span<const std::uint8_t> bytes, const KvStateTarget& target = {});
/// The bytes of a state file (size bounded before reading; see read_whole_file).
std::vector<std::uint8_t> read_kv_state_file(const std::string& path);

// ---- sequences inside one cache ----------------------------------------------------------------------

/// Copy sequence src into a new sequence dst of the same cache (a shared system prompt, or a prefix
/// restored for a request that continues with other tokens): dst then holds exactly what src holds
/// and continues as src would. A copy (through save_sequence / restore_sequence), not shared pages:
/// dst's bytes count in memory() and in the budget.
void fork_sequence(KvCache& cache, int src, int dst);

}  // namespace aqpim
