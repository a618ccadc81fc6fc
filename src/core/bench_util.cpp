#include "aqpim/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/simd.h"
#include "core/read_bandwidth.h"
#include "aqpim/timer.h"
#include "core/int_math.h"

namespace aqpim {

double time_per_call(const std::function<void(std::int64_t)>& fn, double min_seconds, int reps) {
    double best = 1e300;
    std::int64_t i = 0;
    fn(i++);  // warm-up (page faults, code, scratch growth)
    for (int r = 0; r < reps; ++r) {
        Timer timer;
        std::int64_t calls = 0;
        do {
            fn(i++);
            ++calls;
        } while (timer.seconds() < min_seconds);
        best = std::min(best, timer.seconds() / double(calls));
    }
    return best;
}

std::size_t llc_bytes() {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) return std::size_t(l3);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? std::size_t(l2) : 0;
}

std::size_t cold_bytes(bool quick) {
    const std::size_t floor = quick ? (std::size_t(256) << 20) : (std::size_t(1) << 30);
    return std::max(floor, 4 * llc_bytes());
}

ColdArena::ColdArena(std::size_t slot_bytes, std::size_t min_bytes, ArenaFill fill)
    : slot_bytes_((slot_bytes + 63) / 64 * 64) {
    n_slots_ = std::int64_t(std::max<std::size_t>(2, ceil_div(min_bytes, slot_bytes_)));
    data_.resize(std::size_t(n_slots_) * slot_bytes_);
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    auto next = [&x] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    };
    auto unit = [](std::uint64_t r) { return float(std::int64_t(r >> 40) - (1 << 23)) / float(1 << 23); };
    switch (fill) {
        case ArenaFill::bytes: {
            auto* w = reinterpret_cast<std::uint64_t*>(data_.data());
            for (std::size_t i = 0; i < data_.size() / 8; ++i) w[i] = next();
            break;
        }
        case ArenaFill::f16: {
            auto* h = reinterpret_cast<f16_t*>(data_.data());
            for (std::size_t i = 0; i < data_.size() / 2; ++i) h[i] = f32_to_fp16_scalar(unit(next()));
            break;
        }
        case ArenaFill::f32: {
            auto* f = reinterpret_cast<float*>(data_.data());
            for (std::size_t i = 0; i < data_.size() / 4; ++i) f[i] = unit(next());
            break;
        }
    }
}

std::uint64_t read_bytes_ref(const std::uint8_t* p, std::size_t n) {
    const auto* w = reinterpret_cast<const std::uint64_t*>(p);
    std::uint64_t a[8] = {};
    const std::size_t nw = n / 8;
    std::size_t i = 0;
    for (; i + 8 <= nw; i += 8)
        for (int j = 0; j < 8; ++j) a[j] ^= w[i + j];
    std::uint64_t s = 0;
    for (int j = 0; j < 8; ++j) s ^= a[j];
    for (; i < nw; ++i) s ^= w[i];
    for (std::size_t b = nw * 8; b < n; ++b) s ^= p[b];
    return s;
}

float stream_f16_fmas_ref(const std::uint8_t* p, std::size_t n, int macs_per_value) {
    float acc[8] = {};
    for (std::size_t i = 0; i + 2 <= n; i += 2) {
        f16_t h;
        std::memcpy(&h, p + i, 2);
        const float x = fp16_to_f32_scalar(h);
        if (macs_per_value == 0) acc[0] += x;
        for (int f = 0; f < macs_per_value; ++f) acc[f] += x * (1.0f + 0.125f * f);
    }
    float s = 0;
    for (float a : acc) s += a;
    return s;
}

float stream_f16_with_macs(const std::uint8_t* p, std::size_t n, int macs_per_value) {
    AQPIM_CHECK(macs_per_value >= 0 && macs_per_value <= 8, "macs_per_value must be 0-8, got {}", macs_per_value);
    using Fn = float (*)(const std::uint8_t*, std::size_t, int);
    static const Fn table[3] = {stream_f16_fmas_ref, stream_f16_fmas_avx2, stream_f16_fmas_avx512};
    return dispatch(table)(p, n, macs_per_value);
}

std::uint64_t read_bytes(const std::uint8_t* p, std::size_t n) {
    using Fn = std::uint64_t (*)(const std::uint8_t*, std::size_t);
    static const Fn table[3] = {read_bytes_ref, read_bytes_avx2, read_bytes_avx512};
    return dispatch(table)(p, n);
}

}  // namespace aqpim
