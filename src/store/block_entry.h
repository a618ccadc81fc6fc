#pragma once
// The entries of the prefix store (docs/kv-store.md, "Entry format"): a block's main entry (its
// header, its delta's ops and lasting literals, an XXH64 checksum) and its tail entry (the literal
// bytes only the state at the block's end holds), and the content-addressed keys they are stored
// under. Everything little-endian and independent of the process, like the KV state it encodes.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "store/state_delta.h"

namespace aqpim::store {

/// 128 bits: two XXH64 (seeds 1 and 2) over the same bytes.
struct BlockKey {
    std::uint64_t hi = 0, lo = 0;
    /// 32 lowercase hex digits.
    std::string hex() const;
    bool operator==(const BlockKey&) const = default;
};

/// What every key of a chain depends on besides its tokens: a block is reused only where a fresh
/// prefill would compute the same state, bit for bit.
struct StoreNamespace {
    std::uint64_t model_fingerprint = 0;  ///< ModelIdentity::fingerprint
    std::string scheme;                   ///< KvCache::scheme(), canonical
    std::int64_t context = 0;             ///< KvCacheOptions::context (bits= and RoPE augmentation code by it)
    int block_tokens = 0;                 ///< tokens per block
    int prefill_chunk = 0;                ///< tokens per forward call of a prefill (rounding depends on it)
    /// The code that computes the state: the aqpim build, its SIMD level and the BLAS kernel
    /// (rounding depends on each)
    std::string kernels;
};
/// The parent key of block 0.
BlockKey namespace_key(const StoreNamespace& ns);
/// The parent key of block 0 for requests with a cache salt (empty: `ns_key` itself).
BlockKey salted_key(const BlockKey& ns_key, const std::string& salt);
/// The key of the block that follows the block with key `prev` and holds `tokens`: a hash of every
/// token up to the block's end.
BlockKey next_block_key(const BlockKey& prev, std::span<const std::int32_t> tokens);

struct BlockHeader {
    std::uint64_t model_fingerprint = 0;
    BlockKey key, parent;                 ///< this block's key and the previous block's (namespace_key for block 0)
    std::uint32_t index = 0;              ///< block number in its chain
    std::uint32_t block_tokens = 0;
    std::uint64_t state_bytes = 0;        ///< size of the state at the block's end (the delta's output)
    std::uint64_t state_checksum = 0;     ///< XXH64 of that state
    std::uint64_t parent_bytes = 0;       ///< size of the state at the block's start
    std::uint64_t tail_bytes = 0;         ///< size of the tail entry (0: none)
    std::uint64_t tail_checksum = 0;      ///< XXH64 of the tail entry
    /// Bit 0: the writer stored the tail entry with this main one (a tail written later, where a
    /// chain was found to end, does not set it).
    std::uint64_t flags = 0;
    static constexpr std::uint64_t kTailStored = 1;
};

struct EncodedBlock {
    std::vector<std::uint8_t> main;  ///< header, ops, lasting literals, checksum
    std::vector<std::uint8_t> tail;  ///< the tail literals (empty: none)
};
/// The entries of delta `d` (parent_bytes, lasting/tail split as split_lasting left them) under
/// header `h`: its key, parent, index, block_tokens, model and state_checksum (XXH64 of the state d
/// writes) from the caller; its sizes and tail checksum from d.
EncodedBlock encode_block(BlockHeader h, const StateDelta& d);

/// A main entry read back; `lasting` views into the bytes it was decoded from.
struct DecodedBlock {
    BlockHeader header;
    std::vector<DeltaOp> ops;
    std::span<const std::uint8_t> lasting;
};
/// Parse a main entry: magic, version, sizes, checksum (untrusted: every count checked against the
/// bytes present before anything is allocated). Corruption is an aqpim::Error "kv store: ...".
DecodedBlock decode_block(std::span<const std::uint8_t> bytes);

/// Store keys: "<hex>" for the main entry, "<hex>.tail" for the tail.
std::string main_entry_name(const BlockKey& k);
std::string tail_entry_name(const BlockKey& k);

}  // namespace aqpim::store
