#pragma once
// Shared helpers of the PIM tests.
#include "aqpim/pim_spec.h"

namespace aqpim::test {

/// The AttAcc HBM3 preset with timing values made pairwise distinct, so each test's constraint is
/// the only one that binds.
inline DramSpec distinct_timing_spec() {
    DramSpec s = DramSpec::load("hbm3-5.2-attacc");
    auto& t = s.timing;
    t.nBL = 2; t.nCCD_S = 3; t.nCCD_L = 5; t.nRCD = 19; t.nRP = 17; t.nRAS = 45; t.nRC = 66;
    t.nRTP_S = 6; t.nRTP_L = 8; t.nWR = 21; t.nCWL = 6; t.nCL = 19; t.nRRD_S = 3; t.nRRD_L = 7;
    t.nFAW = 30; t.nWTR_S = 8; t.nWTR_L = 11; t.nCCD_AB = 9; t.nCCD_AB_cap = 13; t.nCCD_SB = 10;
    t.nCCD_SB_cap = 14;
    s.power_cap = false;
    return s;
}

}  // namespace aqpim::test
