#pragma once
// XXH64, Yann Collet's 64-bit xxHash (the algorithm as its specification states it; test vectors of
// the reference implementation in tests/core/test_hash.cpp): the checksum of the KV-state format
// and the fingerprint of a model's weights (docs/kv-state.md). Fast (several GB/s on one core), not
// cryptographic: it detects corruption and mix-ups, not forgery.

#include <cstddef>
#include <cstdint>

namespace aqpim {

/// Streaming XXH64: update() any number of times, digest() at any point (it does not end the stream).
class Xxh64 {
public:
    explicit Xxh64(std::uint64_t seed = 0);
    void update(const void* data, std::size_t n);
    std::uint64_t digest() const;

private:
    std::uint64_t seed_, v_[4];
    std::uint64_t total_ = 0;
    unsigned char buf_[32];
    std::size_t buffered_ = 0;
};

/// XXH64 of n bytes.
std::uint64_t xxh64(const void* data, std::size_t n, std::uint64_t seed = 0);

}  // namespace aqpim
