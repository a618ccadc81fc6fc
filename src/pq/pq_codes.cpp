#include "aqpim/pq_codes.h"

#include <cstring>

namespace aqpim {

void store_token_code(std::uint8_t* blocks, std::int64_t t, int M, int nbits, const std::uint8_t* code) {
    std::uint8_t* block = blocks + (t / kCodeBlock) * code_block_bytes(M, nbits);
    const int i = int(t % kCodeBlock);
    for (int m = 0; m < M; ++m) {
        int shift;
        std::uint8_t& byte = block[code_byte_in_block(i, m, nbits, &shift)];
        if (nbits == 8)
            byte = code[m];
        else
            byte = std::uint8_t((byte & ~(0x0f << shift)) | ((code[m] & 0x0f) << shift));
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
