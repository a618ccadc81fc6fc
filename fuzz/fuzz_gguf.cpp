// GGUF: the reader (header, metadata, tensor table) and load_model on the same bytes (weights,
// vocabulary), as `aqpim run/info/convert -m FILE.gguf` read them. Seeds: scripts/fuzz.sh.
#include "aqpim/gguf.h"
#include "aqpim/model.h"
#include "aqpim/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    fuzz::clear_scratch();
    const std::string path = fuzz::write_scratch("model.gguf", {reinterpret_cast<const char*>(data), size});
    fuzz::expect_success_or_error([&] {
        const GgufFile gguf(path);
        for (const auto& t : gguf.tensors()) (void)gguf.find_tensor(t.name);
    });
    fuzz::expect_success_or_error([&] {
        const LoadedModel m = load_model(path);
        if (m.tokenizer) (void)m.tokenizer->decode(m.tokenizer->encode("Once upon a time", true));
    });
    return 0;
}
