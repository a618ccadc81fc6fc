#pragma once
// Integer-add loops behind aqpim::measure_core_clock (aqpim/bench_util.h). A dependent chain of
// one-cycle adds retires exactly one add per core clock; eight independent chains retire as many
// adds per clock as the core has ALU ports for that register width (and fewer when a sibling
// hyperthread takes some). Each level uses its widest registers, so the core runs in the clock
// range it runs that level's kernels at.

#include <cstdint>
#include <cstring>

namespace aqpim {

/// 8 * iterations adds: one chain (dependent) or eight (independent); returns a value to use.
std::uint64_t add_loop_ref(std::uint64_t iterations, bool independent);
std::uint64_t add_loop_avx2(std::uint64_t iterations, bool independent);
std::uint64_t add_loop_avx512(std::uint64_t iterations, bool independent);

/// The SIMD loops, for a vector register type Reg (__m256i, __m512i) whose lanes start as `start`
/// and grow by `step`. vpaddd has one cycle of latency; the loops are asm so that the compiler
/// cannot fold the chains.
template <class Reg>
std::uint64_t vector_add_loop(std::uint64_t iterations, bool independent, Reg start, Reg step) {
    Reg a = start, b = a, c = a, d = a, e = a, f = a, g = a, h = a;
    if (independent)
        asm volatile(
            "1:\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[b], %[b]\n\t"
            "vpaddd %[y], %[c], %[c]\n\t"
            "vpaddd %[y], %[d], %[d]\n\t"
            "vpaddd %[y], %[e], %[e]\n\t"
            "vpaddd %[y], %[f], %[f]\n\t"
            "vpaddd %[y], %[g], %[g]\n\t"
            "vpaddd %[y], %[h], %[h]\n\t"
            "dec %[n]\n\t"
            "jnz 1b"
            : [a] "+x"(a), [b] "+x"(b), [c] "+x"(c), [d] "+x"(d), [e] "+x"(e), [f] "+x"(f), [g] "+x"(g), [h] "+x"(h),
              [n] "+r"(iterations)
            : [y] "x"(step));
    else
        asm volatile(
            "1:\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "vpaddd %[y], %[a], %[a]\n\t"
            "dec %[n]\n\t"
            "jnz 1b"
            : [a] "+x"(a), [n] "+r"(iterations)
            : [y] "x"(step));
    const Reg s = a + b + c + d + e + f + g + h;  // GCC vector arithmetic on 64-bit lanes
    std::uint64_t lane0;
    std::memcpy(&lane0, &s, sizeof lane0);
    return lane0;
}

}  // namespace aqpim
