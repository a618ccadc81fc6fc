#pragma once
// Force a SIMD level for the rest of a scope (tests run every level the CPU supports).

#include "aqpim/simd.h"

namespace aqpim::test {

class SimdLevelGuard {
public:
    SimdLevelGuard() : saved_(active_simd_level()) {}
    explicit SimdLevelGuard(SimdLevel level) : SimdLevelGuard() { set_simd_level(level); }
    ~SimdLevelGuard() { set_simd_level(saved_); }
    SimdLevelGuard(const SimdLevelGuard&) = delete;
    SimdLevelGuard& operator=(const SimdLevelGuard&) = delete;

private:
    SimdLevel saved_;
};

}  // namespace aqpim::test
