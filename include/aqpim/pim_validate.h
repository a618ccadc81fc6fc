#pragma once
// Validation of the PIM simulator against AttAcc's published simulator output (file ramulator.out
// of the public attacc_simulator repository, numbers quoted in issue 6 and docs/pim-validation.md).

#include <string>
#include <vector>

namespace aqpim {

struct PimValidationRow {
    std::string name;          ///< e.g. "bank, power cap"
    std::string placement;     ///< bank, bank_group, buffer
    bool power_cap = false;
    double reference = 0;      ///< AttAcc cycles
    double simulated = 0;      ///< our cycles
    double error() const { return simulated / reference - 1.0; }
};

/// FP16 attention, 130 heads x 2048 tokens x head_dim 128 on one HBM3 5.2 Gbps stack (preset
/// hbm3-5.2-attacc), every AttAcc configuration the issue lists; `refresh` false leaves refresh out
/// (docs/pim-validation.md's last column).
std::vector<PimValidationRow> validate_attacc(bool refresh = true);

/// The tolerance the tests and `--validate` apply.
constexpr double kAttAccTolerance = 0.10;

}  // namespace aqpim
