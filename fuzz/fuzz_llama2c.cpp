// llama2.c: a checkpoint and the tokenizer.bin found beside it, loaded as `aqpim run -m
// model.bin` loads them. Input: checkpoint SEP tokenizer.bin (fuzz_input.h). Seeds: scripts/fuzz.sh.
#include "aqpim/model.h"
#include "aqpim/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    const auto parts = fuzz::split_parts(data, size);
    fuzz::clear_scratch();
    const std::string model = fuzz::write_scratch("model.bin", fuzz::part(parts, 0));
    if (parts.size() > 1) fuzz::write_scratch("tokenizer.bin", parts[1]);
    fuzz::expect_success_or_error([&] {
        const LoadedModel m = load_model(model);
        if (m.tokenizer) (void)m.tokenizer->decode(m.tokenizer->encode("Once upon a time", true));
    });
    return 0;
}
