// safetensors + config.json: the file reader and load_model on a directory, as
// `aqpim run/info/convert -m DIR` read it. Input: config.json SEP model.safetensors [SEP
// tokenizer.json] (fuzz_input.h). Seeds: scripts/fuzz.sh.
#include "aqpim/model.h"
#include "aqpim/safetensors.h"
#include "aqpim/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    const auto parts = fuzz::split_parts(data, size);
    fuzz::clear_scratch();
    fuzz::write_scratch("config.json", fuzz::part(parts, 0));
    const std::string weights = fuzz::write_scratch("model.safetensors", fuzz::part(parts, 1));
    if (parts.size() > 2) fuzz::write_scratch("tokenizer.json", parts[2]);
    fuzz::expect_success_or_error([&] {
        const SafetensorsFile f(weights);
        (void)f;
    });
    fuzz::expect_success_or_error([&] {
        const LoadedModel m = load_model(fuzz::scratch_dir().string());
        if (m.tokenizer) (void)m.tokenizer->decode(m.tokenizer->encode("Once upon a time", true));
    });
    return 0;
}
