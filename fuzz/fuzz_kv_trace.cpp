// KV traces (`aqpim pimsim --kv-trace FILE`, written by `aqpim run --trace`): read_kv_trace.
// Seeds: traces of short runs (scripts/fuzz.sh).
#include "aqpim/kv_trace.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    fuzz::clear_scratch();
    const std::string path = fuzz::write_scratch("trace.jsonl", {reinterpret_cast<const char*>(data), size});
    fuzz::expect_success_or_error([&] { (void)read_kv_trace(path); });
    return 0;
}
