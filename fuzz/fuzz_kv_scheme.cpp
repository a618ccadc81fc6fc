// The `--kv` scheme grammar: parse_kv_schemes, then each scheme's cache built for a small KV
// shape under a memory budget and fed a few tokens, as `aqpim run/eval --kv TEXT` would.
// Seeds: every scheme name and documented parameters (scripts/fuzz.sh).
#include <vector>

#include "aqpim/kv_scheme.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    if (size > 4096) return 0;  // a command-line option, not a file
    const std::string text(reinterpret_cast<const char*>(data), size);
    KvShape shape;
    shape.n_layer = 1;
    shape.n_kv_head = 2;
    shape.head_dim = 64;
    constexpr std::int64_t n_tokens = 16;
    // k, v [n_tokens][n_kv_head * head_dim]: a fixed, varied pattern
    std::vector<float> kv(std::size_t(n_tokens * shape.n_kv_head * shape.head_dim));
    for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = float(int(i * 2654435761u % 2001) - 1000) / 500.0f;
    fuzz::expect_success_or_error([&] {
        for (const KvSchemeSpec& spec : parse_kv_schemes(text)) {
            KvCacheOptions options;
            options.memory_budget = std::uint64_t(64) << 20;
            const auto cache = make_kv_cache(spec, shape, options);
            cache->add_sequence(0);
            cache->append(0, 0, n_tokens, kv.data(), kv.data());
            (void)cache->memory();
        }
    });
    return 0;
}
