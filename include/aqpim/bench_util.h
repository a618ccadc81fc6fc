#pragma once
// Measurement helpers for benchmarks (`aqpim bench`, bench/): best-of-N timing, and a cold arena (a working set several
// times the last-level cache, walked so that every call reads memory no earlier call left in cache).

#include <cstdint>
#include <functional>
#include <string>

#include "aqpim/aligned.h"

namespace aqpim {

/// Seconds per call of fn(i): calls fn(0), fn(1), ... until at least min_seconds have passed,
/// repeated `reps` times; the best repetition wins (least disturbed by other load).
double time_per_call(const std::function<void(std::int64_t)>& fn, double min_seconds, int reps);

/// Last-level cache size in bytes as the OS reports it (0 if unknown).
std::size_t llc_bytes();

/// What a cold arena holds: random bytes (valid PQ codes), or f16 / f32 values uniform in
/// [-1, 1) (random bits would contain NaNs and subnormals, whose slow paths distort timings).
enum class ArenaFill { bytes, f16, f32 };

/// A large buffer of random data cut into `n_slots` slots of `slot_bytes` each; slot(i) cycles
/// through them. Sized to max(4 x LLC, min_bytes) so a round trip evicts everything.
class ColdArena {
public:
    ColdArena(std::size_t slot_bytes, std::size_t min_bytes, ArenaFill fill = ArenaFill::bytes);
    std::uint8_t* slot(std::int64_t i) { return data_.data() + std::size_t(i % n_slots_) * slot_bytes_; }
    std::int64_t n_slots() const { return n_slots_; }
    std::size_t bytes() const { return data_.size(); }

private:
    std::size_t slot_bytes_;
    std::int64_t n_slots_;
    AlignedBuffer<std::uint8_t> data_;
};

/// Total bytes a cold run should span at least: 4 x LLC, 1 GiB floor (quick: 256 MiB floor).
std::size_t cold_bytes(bool quick);

/// Read every byte of [p, p + n) with the widest loads of the active SIMD level and a software
/// prefetch ahead; returns a checksum so the read cannot be elided. The bandwidth roof of the
/// attention kernels.
std::uint64_t read_bytes(const std::uint8_t* p, std::size_t n);

/// Stream [p, p + n) as f16 the way read_bytes does, convert every value to f32 and spend
/// `macs_per_value` (0-8) multiply-adds on it: a streaming kernel of chosen arithmetic intensity,
/// with no access pattern or loop structure of its own. Dense f16 attention for a GQA group of g
/// query heads spends g per K value and g per V value, so this kernel at g is the most a dense
/// kernel can expect on a core that has to overlap that compute with the stream. Returns a sum.
float stream_f16_with_macs(const std::uint8_t* p, std::size_t n, int macs_per_value);

/// What a core can issue right now. `ghz`: the clock, from a dependent chain of one-cycle integer
/// adds in the active SIMD level's widest registers (one retires per cycle). `vector_gops`: G adds
/// per second from eight independent chains of the same adds: the ALU ports of that width times
/// the clock (2 x ghz for 512-bit adds on recent Intel cores), less whatever a sibling
/// hyperthread of another tenant takes. Best of 20 runs of about 3 ms each. Lets a benchmark turn
/// tokens/s into cycles per token and set a kernel against its instruction-port bound at the
/// clock and port share this run actually had.
struct CoreClock {
    double ghz = 0;
    double vector_gops = 0;
};
CoreClock measure_core_clock();

}  // namespace aqpim
