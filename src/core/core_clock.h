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

// A loop body as asm text: eight adds of %[y] (ADD(r) adds it into operand r), then the count.
#define AQPIM_ADD_LOOP(ADD, r0, r1, r2, r3, r4, r5, r6, r7) \
    "1:\n\t" ADD(r0) ADD(r1) ADD(r2) ADD(r3) ADD(r4) ADD(r5) ADD(r6) ADD(r7) "dec %[n]\n\tjnz 1b"
#define AQPIM_SCALAR_ADD(r) "add %[y], %[" r "]\n\t"
#define AQPIM_VECTOR_ADD(r) "vpaddd %[y], %[" r "], %[" r "]\n\t"

/// The SIMD loops, for a vector register type Reg (__m256i, __m512i) whose lanes start as `start`
/// and grow by `step`. vpaddd has one cycle of latency; the loops are asm so that the compiler
/// cannot fold the chains.
template <class Reg>
std::uint64_t vector_add_loop(std::uint64_t iterations, bool independent, Reg start, Reg step) {
    Reg a = start, b = a, c = a, d = a, e = a, f = a, g = a, h = a;
    if (independent)
        asm volatile(AQPIM_ADD_LOOP(AQPIM_VECTOR_ADD, "a", "b", "c", "d", "e", "f", "g", "h")
                     : [a] "+x"(a), [b] "+x"(b), [c] "+x"(c), [d] "+x"(d), [e] "+x"(e), [f] "+x"(f), [g] "+x"(g),
                       [h] "+x"(h), [n] "+r"(iterations)
                     : [y] "x"(step));
    else
        asm volatile(AQPIM_ADD_LOOP(AQPIM_VECTOR_ADD, "a", "a", "a", "a", "a", "a", "a", "a")
                     : [a] "+x"(a), [n] "+r"(iterations)
                     : [y] "x"(step));
    const Reg s = a + b + c + d + e + f + g + h;  // GCC vector arithmetic on 64-bit lanes
    std::uint64_t lane0;
    std::memcpy(&lane0, &s, sizeof lane0);
    return lane0;
}

}  // namespace aqpim
