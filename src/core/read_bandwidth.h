#pragma once
// Streaming-read kernels behind aqpim::read_bytes (aqpim/bench_util.h): the bandwidth roof the
// attention kernels are compared with. They read the way the dense kernels do (wide loads plus a
// software prefetch a few KiB ahead), so neither side has an access-pattern advantage.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace aqpim {

inline constexpr std::size_t kReadPrefetchBytes = 4096;

std::uint64_t read_bytes_ref(const std::uint8_t* p, std::size_t n);
std::uint64_t read_bytes_avx2(const std::uint8_t* p, std::size_t n);
std::uint64_t read_bytes_avx512(const std::uint8_t* p, std::size_t n);

/// (The SIMD kernels hand the bytes past their last whole block to the ref.)
float stream_f16_fmas_ref(const std::uint8_t* p, std::size_t n, int macs_per_value);
float stream_f16_fmas_avx2(const std::uint8_t* p, std::size_t n, int macs_per_value);
float stream_f16_fmas_avx512(const std::uint8_t* p, std::size_t n, int macs_per_value);

/// Calls f(std::integral_constant<int, F>{}) for F = macs_per_value in 0..8 (the kernels' template).
template <class Fn>
auto with_fma_count(int macs_per_value, Fn&& f) {
    switch (macs_per_value) {
        case 0: return f(std::integral_constant<int, 0>{});
        case 1: return f(std::integral_constant<int, 1>{});
        case 2: return f(std::integral_constant<int, 2>{});
        case 3: return f(std::integral_constant<int, 3>{});
        case 4: return f(std::integral_constant<int, 4>{});
        case 5: return f(std::integral_constant<int, 5>{});
        case 6: return f(std::integral_constant<int, 6>{});
        case 7: return f(std::integral_constant<int, 7>{});
        default: return f(std::integral_constant<int, 8>{});
    }
}

}  // namespace aqpim
