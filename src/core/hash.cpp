// XXH64 (aqpim/hash.h).

#include "aqpim/hash.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace aqpim {

namespace {

constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull,
                        kP4 = 0x85EBCA77C2B2AE63ull, kP5 = 0x27D4EB2F165667C5ull;

std::uint64_t read64(const unsigned char* p) {
    if constexpr (std::endian::native == std::endian::little) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        return v;
    }
    std::uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= std::uint64_t(p[b]) << (8 * b);  // little-endian on any host
    return v;
}
std::uint32_t read32(const unsigned char* p) {
    return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}

std::uint64_t lane_round(std::uint64_t acc, std::uint64_t lane) { return std::rotl(acc + lane * kP2, 31) * kP1; }
std::uint64_t merge(std::uint64_t h, std::uint64_t v) { return (h ^ lane_round(0, v)) * kP1 + kP4; }

/// 32-byte stripes of p[0, n - n % 32) into the four lanes; returns the bytes consumed.
std::size_t stripes(std::uint64_t* v, const unsigned char* p, std::size_t n) {
    std::uint64_t v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];  // in registers: four independent chains
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        v0 = lane_round(v0, read64(p + i));
        v1 = lane_round(v1, read64(p + i + 8));
        v2 = lane_round(v2, read64(p + i + 16));
        v3 = lane_round(v3, read64(p + i + 24));
    }
    v[0] = v0, v[1] = v1, v[2] = v2, v[3] = v3;
    return i;
}

}  // namespace

Xxh64::Xxh64(std::uint64_t seed) : seed_(seed), v_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1} {}

void Xxh64::update(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += n;
    if (buffered_ > 0) {  // complete the buffered stripe first
        const std::size_t take = std::min(n, 32 - buffered_);
        std::memcpy(buf_ + buffered_, p, take);
        buffered_ += take;
        p += take;
        n -= take;
        if (buffered_ < 32) return;
        stripes(v_, buf_, 32);
        buffered_ = 0;
    }
    const std::size_t done = stripes(v_, p, n);
    std::memcpy(buf_, p + done, n - done);
    buffered_ = n - done;
}

std::uint64_t Xxh64::digest() const {
    std::uint64_t h;
    if (total_ >= 32) {
        h = std::rotl(v_[0], 1) + std::rotl(v_[1], 7) + std::rotl(v_[2], 12) + std::rotl(v_[3], 18);
        for (std::uint64_t v : v_) h = merge(h, v);
    } else {
        h = seed_ + kP5;
    }
    h += total_;
    const unsigned char* p = buf_;
    std::size_t n = buffered_;
    for (; n >= 8; p += 8, n -= 8) h = std::rotl(h ^ lane_round(0, read64(p)), 27) * kP1 + kP4;
    if (n >= 4) {
        h = std::rotl(h ^ (std::uint64_t(read32(p)) * kP1), 23) * kP2 + kP3;
        p += 4;
        n -= 4;
    }
    for (; n > 0; ++p, --n) h = std::rotl(h ^ (*p * kP5), 11) * kP1;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
}

std::uint64_t xxh64(const void* data, std::size_t n, std::uint64_t seed) {
    Xxh64 h(seed);
    h.update(data, n);
    return h.digest();
}

}  // namespace aqpim
