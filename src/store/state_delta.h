#pragma once
// A KV state written against an earlier one, as copy and literal operations (docs/kv-store.md,
// "Blocks"). A block of the prefix store is the state of a sequence at the block's end written as a
// delta against the state at its start. Both are save_kv_state bytes; the later state holds most of
// the earlier one's bytes in the same order (rows, codes and codebook versions only grow) with new
// bytes between them, so a delta is those new bytes and a few copies per layer and head. Nothing
// here knows the state's layout: it works for every KV scheme.
//
// A chain of deltas composes into its last state without building the states between (the work is
// linear in the last state's size). A delta's literals can be split in two: the bytes the next
// state still holds (the block's lasting part: new rows, codes, codebook versions) and the bytes
// only the state at the block's end holds (a PQ sequence's f16 window, replaced by codes in the
// next block), so a restore of blocks 0..j reads the lasting parts of 0..j and one tail.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace aqpim::store {

/// One operation of a delta, in output order: `len` bytes copied from the parent state at offset
/// `src` (copy), or taken from the delta's literal bytes at offset `src` (literal).
struct DeltaOp {
    std::uint64_t src = 0;
    std::uint64_t len = 0;
    bool copy = false;
};

/// Bytes [begin, end) of a state.
struct ByteRange {
    std::uint64_t begin = 0, end = 0;
};

/// A state written against its parent.
struct StateDelta {
    std::vector<DeltaOp> ops;            ///< in output order
    std::vector<std::uint8_t> literals;  ///< [lasting bytes][tail bytes]: the literal ops' bytes
    std::uint64_t lasting_bytes = 0;     ///< literals[0, lasting_bytes) are the lasting part
    std::uint64_t parent_bytes = 0;      ///< size of the state the copies read

    /// Size of the state the delta writes (the sum of the ops' lengths).
    std::uint64_t output_bytes() const;
};

/// `now` written against `parent` (empty: every byte a literal). Runs `parent` holds too are found
/// at content-defined anchors (a 64-byte rolling hash) and extended both ways byte by byte, so a
/// copy is at least 64 bytes and every byte outside the copies is a literal. No copy reads a byte of
/// `forbidden` (sorted, disjoint ranges of the parent: its tail as a stored block split it). All
/// literals count as lasting until split_lasting() is called.
StateDelta diff_states(std::span<const std::uint8_t> parent, std::span<const std::uint8_t> now,
                       std::span<const ByteRange> forbidden = {});

/// Reorder `d`'s literals into the bytes `next` copies (lasting, first) and the rest (tail), and
/// rewrite d's literal ops to match; `next` is the delta of the following state (whose parent is
/// d's output). The output of d is unchanged.
void split_lasting(StateDelta& d, const StateDelta& next);

/// The ranges of a delta's output its tail part fills (sorted, disjoint): what the next block's
/// delta must not copy, so that a chain read without this block's tail never needs it.
std::vector<ByteRange> tail_ranges(std::span<const DeltaOp> ops, std::uint64_t lasting_bytes);
/// The tail part of a delta whose output is `state`: the bytes its tail ranges take from it (a tail
/// written later from the state a prefill computed, for a block stored without one).
std::vector<std::uint8_t> tail_of(std::span<const DeltaOp> ops, std::uint64_t lasting_bytes, std::uint64_t tail_bytes,
                                  std::span<const std::uint8_t> state);

/// One delta of a chain as read back from the store: its ops, and its literal bytes in two parts
/// (the tail may be absent when no op reads it).
struct DeltaView {
    std::span<const DeltaOp> ops;
    std::span<const std::uint8_t> lasting;  ///< literal offsets [0, lasting.size())
    std::span<const std::uint8_t> tail;     ///< literal offsets [lasting.size(), + tail_bytes); empty: not read
    std::uint64_t tail_bytes = 0;           ///< the tail's size as the block states it
    std::uint64_t parent_bytes = 0;
};

/// How far a chain composes, found without copying its bytes: chain[0] has no parent
/// (parent_bytes 0), chain[j]'s parent is chain[j-1]'s output.
struct ChainCheck {
    /// Leading blocks that compose, none of which copies bytes of the tail of the block before it (a
    /// block written against another split of its parent: two writers raced).
    std::size_t consistent = 0;
    /// The block after them when it is malformed (an op out of its source's range, a parent size
    /// that is not the previous output's, an output over max_bytes, too much work: over 2^22
    /// pieces in a state or 2^25 over the chain), else chain.size() or the inconsistent block.
    std::size_t bad_block = 0;
    std::string why;  ///< what is wrong with bad_block (empty: nothing malformed)
};
ChainCheck check_chain(std::span<const DeltaView> chain, std::uint64_t max_bytes);

/// The last state of a consistent chain (check_chain), which needs the last block's tail when it
/// has one. Anything else is an aqpim::Error naming the block.
std::vector<std::uint8_t> compose_chain(std::span<const DeltaView> chain, std::uint64_t max_bytes);

}  // namespace aqpim::store
