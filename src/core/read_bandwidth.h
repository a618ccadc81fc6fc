#pragma once
// Streaming-read kernels behind aqpim::read_bytes (aqpim/bench_util.h): the bandwidth roof the
// attention kernels are compared with. They read the way the dense kernels do (wide loads plus the
// software prefetch of simd/prefetch.h's prefetch_stream), so neither side has an access-pattern
// advantage.

#include <cstddef>
#include <cstdint>

namespace aqpim {

std::uint64_t read_bytes_ref(const std::uint8_t* p, std::size_t n);
std::uint64_t read_bytes_avx2(const std::uint8_t* p, std::size_t n);
std::uint64_t read_bytes_avx512(const std::uint8_t* p, std::size_t n);

/// (The SIMD kernels hand the bytes past their last whole block to the ref.)
float stream_f16_fmas_ref(const std::uint8_t* p, std::size_t n, int macs_per_value);
float stream_f16_fmas_avx2(const std::uint8_t* p, std::size_t n, int macs_per_value);
float stream_f16_fmas_avx512(const std::uint8_t* p, std::size_t n, int macs_per_value);

}  // namespace aqpim
