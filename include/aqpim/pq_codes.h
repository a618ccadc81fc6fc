#pragma once
// PQ codes laid out for scanning: tokens in blocks of kCodeBlock = 32.
//
//   nbits 8: a block is M rows of 32 bytes, subspace-major; byte i of row m = code(token i, m).
//   nbits 4: a block is ceil(M / 4) groups of 64 bytes; group g holds subspaces 4g .. 4g+3:
//            byte 4i + j = code(token i, 4g+j) | code(token i+16, 4g+j) << 4   (i < 16, j < 4)
//            i.e. dword i of a group packs, for subspace j, token i in nibble 2j and token i+16
//            in nibble 2j+1. Subspaces past M (when M % 4 != 0) are padding with code 0.
//
// Why the 4-bit groups: shifting a group's 16 dwords right by 4k puts one subspace's codes for
// 16 tokens in the low nibbles, which vpermps uses as table indices (it ignores higher bits), so
// exact float lookups need no unpacking; and the four sub-codes of a token sit in one dword, so
// u8 lookups (vpermb) sum per token with one vpdpbusd. Padding tokens past n have code 0.
//
// Unpacked codes ([n][M], one byte per sub-code) are what ProductQuantizer::encode produces.

#include <cstddef>
#include <cstdint>

namespace aqpim {

inline constexpr int kCodeBlock = 32;

/// Subspaces in the layout: M rounded up to a multiple of 4 at 4 bits.
inline constexpr int code_padded_M(int M, int nbits) { return nbits == 4 ? (M + 3) / 4 * 4 : M; }
/// Bytes of one block (32 tokens).
inline constexpr std::size_t code_block_bytes(int M, int nbits) {
    return std::size_t(code_padded_M(M, nbits)) * kCodeBlock * nbits / 8;
}
/// Blocks needed for n tokens.
inline constexpr std::int64_t code_blocks_for(std::int64_t n) { return (n + kCodeBlock - 1) / kCodeBlock; }

/// Byte holding sub-code m of token t inside its block, and the shift of its nibble (4-bit).
inline std::size_t code_byte_in_block(int t_in_block, int m, int nbits, int* shift) {
    if (nbits == 8) {
        *shift = 0;
        return std::size_t(m) * kCodeBlock + t_in_block;
    }
    *shift = t_in_block < 16 ? 0 : 4;
    return std::size_t(m / 4) * 64 + (t_in_block % 16) * 4 + m % 4;
}

/// Sub-code m of token t.
inline std::uint8_t code_at(const std::uint8_t* blocks, std::int64_t t, int M, int nbits, int m) {
    int shift;
    const std::uint8_t* block = blocks + (t / kCodeBlock) * code_block_bytes(M, nbits);
    const std::uint8_t byte = block[code_byte_in_block(int(t % kCodeBlock), m, nbits, &shift)];
    return nbits == 8 ? byte : std::uint8_t((byte >> shift) & 0x0f);
}

/// Pack codes [n][M] (values < 2^nbits) into code_blocks_for(n) blocks at `blocks`.
void pack_code_blocks(const std::uint8_t* codes, std::int64_t n, int M, int nbits, std::uint8_t* blocks);
/// Inverse of pack_code_blocks for the first n tokens.
void unpack_code_blocks(const std::uint8_t* blocks, std::int64_t n, int M, int nbits, std::uint8_t* codes);
/// Write one token's codes [M] at position t (the block must exist; other tokens are kept).
void store_token_code(std::uint8_t* blocks, std::int64_t t, int M, int nbits, const std::uint8_t* code);

}  // namespace aqpim
