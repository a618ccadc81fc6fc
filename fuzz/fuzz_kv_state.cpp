// KV-state files (`aqpim run --restore-state FILE`, docs/kv-state.md): load_kv_state, the single
// entry point from bytes (parse, build the cache the state names, restore it), with a memory
// budget as a server gives it. Seeds: states saved by short runs of every scheme (scripts/fuzz.sh).
#include "aqpim/kv_state.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    KvStateTarget target;
    target.memory_budget = std::uint64_t(256) << 20;
    fuzz::expect_success_or_error([&] { (void)load_kv_state({data, size}, target); });
    return 0;
}
