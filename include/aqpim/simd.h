#pragma once
// CPU feature detection and kernel dispatch. Every kernel family has a scalar `_ref` version (the
// specification) and AVX2 / AVX-512 versions compiled in their own files with their own flags.
// The active level is the best one the CPU supports, unless forced by the environment variable
// AQPIM_SIMD=ref|avx2|avx512 or by set_simd_level() (the command's --simd flag).

#include <string>
#include <string_view>
#include <vector>

namespace aqpim {

enum class SimdLevel : int { ref = 0, avx2 = 1, avx512 = 2 };

const char* simd_level_name(SimdLevel level);
/// Parse "ref" | "avx2" | "avx512"; throws aqpim::Error naming the bad value.
SimdLevel parse_simd_level(std::string_view name);

/// True if this CPU can run kernels of `level` (AVX2 needs AVX2+FMA+F16C+BMI2; AVX-512 needs
/// F+BW+VL+DQ+VBMI+VNNI as well: Ice Lake, Sapphire Rapids, Zen 4 and later).
bool cpu_supports(SimdLevel level);
/// True if this CPU has AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and later) beside the
/// AVX-512 level: the bf16 value pass (PqValuePath::bf16) runs only there.
bool cpu_has_avx512_bf16();
/// The best level this CPU supports.
SimdLevel best_simd_level();
/// Every level this CPU can run, from ref upwards (what tests compare against ref).
std::vector<SimdLevel> supported_simd_levels();

/// The level kernels dispatch to now. Initialised once from AQPIM_SIMD (error if the CPU cannot
/// run the requested level) or best_simd_level().
SimdLevel active_simd_level();
/// Force a level; throws aqpim::Error if the CPU cannot run it.
void set_simd_level(SimdLevel level);

/// Dispatch helper: pick table[level] for the active level. Tables are indexed by SimdLevel.
template <class Table>
const Table& dispatch(const Table (&table)[3]) {
    return table[static_cast<int>(active_simd_level())];
}

}  // namespace aqpim
