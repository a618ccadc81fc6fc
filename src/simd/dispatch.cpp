#include "aqpim/simd.h"

#include <atomic>
#include <cpuid.h>
#include <cstdlib>

#include "aqpim/error.h"

namespace aqpim {

namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c" feature name.
bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

// AVX512-BF16 from CPUID leaf 7, sub-leaf 1 (EAX bit 5).
bool detect_avx512_bf16() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
}

bool detect(SimdLevel level) {
    __builtin_cpu_init();
    switch (level) {
        case SimdLevel::ref:
            return true;
        case SimdLevel::avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   cpu_has_f16c() && __builtin_cpu_supports("bmi2");
        case SimdLevel::avx512:
            return detect(SimdLevel::avx2) && __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi") &&
                   __builtin_cpu_supports("avx512vnni");
    }
    return false;
}

SimdLevel initial_level() {
    if (const char* env = std::getenv("AQPIM_SIMD"); env && *env) {
        SimdLevel level = parse_simd_level(env);
        AQPIM_CHECK(cpu_supports(level), "AQPIM_SIMD={}: this CPU cannot run {} kernels (best: {})", env,
                    simd_level_name(level), simd_level_name(best_simd_level()));
        return level;
    }
    return best_simd_level();
}

std::atomic<int>& level_slot() {
    static std::atomic<int> slot{static_cast<int>(initial_level())};
    return slot;
}

}  // namespace

const char* simd_level_name(SimdLevel level) {
    switch (level) {
        case SimdLevel::ref: return "ref";
        case SimdLevel::avx2: return "avx2";
        case SimdLevel::avx512: return "avx512";
    }
    return "?";
}

SimdLevel parse_simd_level(std::string_view name) {
    if (name == "ref") return SimdLevel::ref;
    if (name == "avx2") return SimdLevel::avx2;
    if (name == "avx512") return SimdLevel::avx512;
    AQPIM_FAIL("unknown SIMD level '{}' (expected ref, avx2 or avx512)", name);
}

bool cpu_supports(SimdLevel level) {
    static const bool supported[3] = {detect(SimdLevel::ref), detect(SimdLevel::avx2), detect(SimdLevel::avx512)};
    return supported[static_cast<int>(level)];
}

bool cpu_has_avx512_bf16() {
    static const bool supported = cpu_supports(SimdLevel::avx512) && detect_avx512_bf16();
    return supported;
}

SimdLevel best_simd_level() {
    if (cpu_supports(SimdLevel::avx512)) return SimdLevel::avx512;
    if (cpu_supports(SimdLevel::avx2)) return SimdLevel::avx2;
    return SimdLevel::ref;
}

std::vector<SimdLevel> supported_simd_levels() {
    std::vector<SimdLevel> out;
    for (SimdLevel l : {SimdLevel::ref, SimdLevel::avx2, SimdLevel::avx512})
        if (cpu_supports(l)) out.push_back(l);
    return out;
}

SimdLevel active_simd_level() { return static_cast<SimdLevel>(level_slot().load(std::memory_order_relaxed)); }

void set_simd_level(SimdLevel level) {
    AQPIM_CHECK(cpu_supports(level), "this CPU cannot run {} kernels (best: {})", simd_level_name(level),
                simd_level_name(best_simd_level()));
    level_slot().store(static_cast<int>(level), std::memory_order_relaxed);
}

}  // namespace aqpim
