#include "aqpim/pq_codes.h"

#include <cstring>

namespace aqpim {

void store_token_code(std::uint8_t* blocks, std::int64_t t, int M, int nbits, const std::uint8_t* code) {
    std::uint8_t* block = blocks + (t / kCodeBlock) * code_block_bytes(M, nbits);
    const int i = int(t % kCodeBlock);
    const std::size_t row_bytes = code_row_bytes(nbits);
    for (int m = 0; m < M; ++m) {
        std::uint8_t* row = block + m * row_bytes;
        if (nbits == 8) {
            row[i] = code[m];
        } else if (i < 16) {
            row[i] = std::uint8_t((row[i] & 0xf0) | (code[m] & 0x0f));
        } else {
            row[i - 16] = std::uint8_t((row[i - 16] & 0x0f) | (code[m] << 4));
        }
    }
}

void pack_code_blocks(const std::uint8_t* codes, std::int64_t n, int M, int nbits, std::uint8_t* blocks) {
    const std::int64_t n_blocks = code_blocks_for(n);
    std::memset(blocks, 0, std::size_t(n_blocks) * code_block_bytes(M, nbits));
    for (std::int64_t t = 0; t < n; ++t) store_token_code(blocks, t, M, nbits, codes + t * M);
}

void unpack_code_blocks(const std::uint8_t* blocks, std::int64_t n, int M, int nbits, std::uint8_t* codes) {
    for (std::int64_t t = 0; t < n; ++t)
        for (int m = 0; m < M; ++m) codes[t * M + m] = code_at(blocks, t, M, nbits, m);
}

}  // namespace aqpim
