#pragma once
// PQ codes laid out for scanning: tokens in blocks of kCodeBlock = 32; inside a block,
// subspace-major rows (row m holds sub-code m of the block's 32 tokens), so one row feeds one
// subspace's lookup table for 32 tokens.
//
//   nbits 4: row = 16 bytes; byte i = code(token i) | code(token i + 16) << 4
//   nbits 8: row = 32 bytes; byte i = code(token i)
//   block  = M rows = M * 16 (4-bit) or M * 32 (8-bit) bytes; tokens past n are padded with code 0.
//
// Unpacked codes ([n][M], one byte per sub-code) are what ProductQuantizer::encode produces.

#include <cstddef>
#include <cstdint>

namespace aqpim {

inline constexpr int kCodeBlock = 32;

/// Bytes of one block row (one subspace, 32 tokens).
inline constexpr std::size_t code_row_bytes(int nbits) { return std::size_t(kCodeBlock) * nbits / 8; }
/// Bytes of one block (M rows).
inline constexpr std::size_t code_block_bytes(int M, int nbits) { return std::size_t(M) * code_row_bytes(nbits); }
/// Blocks needed for n tokens.
inline constexpr std::int64_t code_blocks_for(std::int64_t n) { return (n + kCodeBlock - 1) / kCodeBlock; }

/// Pack codes [n][M] (values < 2^nbits) into code_blocks_for(n) blocks at `blocks`.
void pack_code_blocks(const std::uint8_t* codes, std::int64_t n, int M, int nbits, std::uint8_t* blocks);
/// Inverse of pack_code_blocks for the first n tokens.
void unpack_code_blocks(const std::uint8_t* blocks, std::int64_t n, int M, int nbits, std::uint8_t* codes);
/// Write one token's codes [M] at position t (the block must exist; other tokens are kept).
void store_token_code(std::uint8_t* blocks, std::int64_t t, int M, int nbits, const std::uint8_t* code);
/// Sub-code m of token t.
inline std::uint8_t code_at(const std::uint8_t* blocks, std::int64_t t, int M, int nbits, int m) {
    const std::uint8_t* row = blocks + (t / kCodeBlock) * code_block_bytes(M, nbits) + m * code_row_bytes(nbits);
    int i = int(t % kCodeBlock);
    if (nbits == 8) return row[i];
    return i < 16 ? (row[i] & 0x0f) : (row[i - 16] >> 4);
}

}  // namespace aqpim
