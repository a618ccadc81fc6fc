// AttAcc validation cases (include/aqpim/pim_validate.h, docs/pim-validation.md).
#include "aqpim/pim_validate.h"

#include "aqpim/pim_attention.h"

namespace aqpim {

std::vector<PimValidationRow> validate_attacc(bool refresh) {
    struct Case {
        const char* name;
        PimPlacement placement;
        bool cap;
        double reference;
    };
    // AttAcc simulator output (ramulator.out); cycle counts of the HBM3 command clock.
    static const Case cases[] = {
        {"bank, no power cap", PimPlacement::bank, false, 28176},
        {"bank, power cap", PimPlacement::bank, true, 37593},
        {"bank, power cap (second run)", PimPlacement::bank, true, 38138},
        {"bank group, no power cap", PimPlacement::bank_group, false, 82515},
        {"bank group, power cap", PimPlacement::bank_group, true, 123251},
        {"buffer die", PimPlacement::buffer_die, false, 344577},
    };
    PimAttentionShape shape;
    shape.kv_heads = 130;
    shape.context = 2048;
    shape.head_dim = 128;
    shape.group = 1;
    shape.devices = 1;
    std::vector<PimValidationRow> rows;
    for (const Case& c : cases) {
        DramSpec spec = DramSpec::load("hbm3-5.2-attacc");
        spec.power_cap = c.cap;
        PimChannel::Options options;
        options.refresh = refresh;
        const PimResult r = simulate_fp16_attention(spec, c.placement, shape, options);
        rows.push_back({c.name, std::string(placement_name(c.placement)), c.cap, c.reference, double(r.cycles)});
    }
    return rows;
}

}  // namespace aqpim
