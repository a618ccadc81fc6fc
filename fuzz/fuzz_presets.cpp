// JSON presets (`--device`, `--preset`, `--dram`, `--energy` NAME|FILE.json): the preset parser,
// then the reader of the kind the file names. Seeds: presets/*/*.json (scripts/fuzz.sh).
#include "aqpim/perf_device.h"
#include "aqpim/perf_energy.h"
#include "aqpim/perf_model.h"
#include "aqpim/pim_spec.h"
#include "aqpim/preset.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    fuzz::expect_success_or_error([&] {
        const Preset p = Preset::parse({reinterpret_cast<const char*>(data), size}, "fuzz.json");
        if (p.kind() == "model") (void)perf_model_from_preset(p);
        else if (p.kind() == "device") (void)device_from_preset(p);
        else if (p.kind() == "dram") (void)DramSpec::from_preset(p);
        else if (p.kind() == "energy") (void)energy_table_from_preset(p);
    });
    return 0;
}
