#pragma once
// The loop of the f16 streaming probe (aqpim::stream_f16_with_macs), shared by the ISA files:
// `V` supplies the register type and its few operations (see read_bandwidth_avx2.cpp and
// read_bandwidth_avx512.cpp). Include only from those files.

#include <cstddef>
#include <cstdint>

#include "core/read_bandwidth.h"
#include "simd/prefetch.h"
#include "simd/static_dispatch.h"

namespace aqpim {

// F multiply-adds on every converted value, as F query heads spend on a K or V row; two
// accumulator sets per head keep the FMA latency hidden. Blocks of 8 registers' worth of f16,
// prefetched like read_bytes (prefetch_stream); the bytes past the last whole block go to the ref.
template <class V, int F>
float stream_f16_fmas(const std::uint8_t* p, std::size_t n) {
    constexpr int kAcc = F == 0 ? 2 : 2 * F;
    constexpr std::size_t kBlock = 8 * V::kLanes * 2;
    typename V::Reg acc[kAcc];
    for (int j = 0; j < kAcc; ++j) acc[j] = V::zero();
    std::size_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
        prefetch_stream(p + i, kBlock);
        for (int c = 0; c < 8; ++c) {
            const typename V::Reg x = V::load_f16(p + i + c * V::kLanes * 2);
            if constexpr (F == 0) {
                acc[c & 1] = V::add(acc[c & 1], x);
            } else {
                for (int f = 0; f < F; ++f) {
                    typename V::Reg& a = acc[(c & 1) * F + f];
                    a = V::fma(x, V::set1(1.0f + 0.125f * f), a);
                }
            }
        }
    }
    typename V::Reg s = acc[0];
    for (int j = 1; j < kAcc; ++j) s = V::add(s, acc[j]);
    float lanes[V::kLanes], total = 0;
    V::store(lanes, s);
    for (float v : lanes) total += v;
    return total + stream_f16_fmas_ref(p + i, n - i, F);
}

/// stream_f16_fmas<V, F> for a run-time F in 0-8 (stream_f16_with_macs has checked the range; 0 is
/// with_constant's fallback).
template <class V>
float stream_f16_fmas_any(const std::uint8_t* p, std::size_t n, int macs_per_value) {
    return with_constant<1, 2, 3, 4, 5, 6, 7, 8>(macs_per_value, [&](auto F) { return stream_f16_fmas<V, F()>(p, n); });
}

}  // namespace aqpim
