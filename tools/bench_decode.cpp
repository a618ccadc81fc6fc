// `aqpim bench decode`: prefill and weight-streaming decode speed of a model, beside the machine's
// streaming-read roof measured in the same run.

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "aqpim/bench_util.h"
#include "aqpim/model.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "aqpim/transformer.h"
#include "bench.h"

namespace aqpim::cli {

using json = nlohmann::ordered_json;

json bench_decode(const DecodeBenchOptions& opt) {
    const LoadedModel m = load_model(opt.model);
    Transformer t(m.weights);
    const ModelConfig& c = m.weights.config;
    json rows = json::array();

    // The roof: one sequential pass over a cold arena, at the thread count decode uses.
    const std::size_t slot = std::size_t(64) << 20;
    double roof_gbps = 0.0;
    {
        ColdArena arena(slot, cold_bytes(opt.quick));
        const int nt = default_threads();
        std::vector<std::uint64_t> sink(nt);
        for (int rep = 0; rep < 3; ++rep) {  // best of three passes over the whole arena
            Timer timer;
            parallel_for(arena.n_slots(), [&](std::int64_t i) { sink[thread_index()] += read_bytes(arena.slot(i), slot); });
            roof_gbps = std::max(roof_gbps, double(arena.n_slots()) * slot / timer.seconds() / 1e9);
        }
        rows.push_back({{"section", "decode"}, {"case", "read roof (cold arena)"}, {"threads", nt},
                        {"gbytes_per_s", roof_gbps}});
    }

    std::mt19937 rng(7);
    std::vector<std::int32_t> prompt(opt.prompt_tokens);
    for (auto& id : prompt) id = std::int32_t(rng() % unsigned(c.n_vocab));
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f16);
    cache->add_sequence(0);
    std::vector<float> logits;

    Timer timer;
    const BatchSequence pre{0, prompt, false};
    t.forward({&pre, 1}, *cache, logits);
    const double prefill_s = timer.seconds();
    const double flops = 2.0 * double(c.n_params()) * opt.prompt_tokens;
    rows.push_back({{"section", "decode"}, {"case", fmt::format("prefill {} tokens", opt.prompt_tokens)},
                    {"threads", default_threads()}, {"tokens_per_s", opt.prompt_tokens / prefill_s},
                    {"gflops", flops / prefill_s / 1e9}});

    std::uint64_t bytes = 0;
    timer.reset();
    for (int i = 0; i < opt.decode_tokens; ++i) {
        const std::int32_t id = std::int32_t(rng() % unsigned(c.n_vocab));
        const BatchSequence step{0, {&id, 1}, false};
        const ForwardTraffic tr = t.forward({&step, 1}, *cache, logits);
        bytes += tr.weight_bytes + tr.kv_bytes;
    }
    const double decode_s = timer.seconds();
    const double gbps = double(bytes) / decode_s / 1e9;
    rows.push_back({{"section", "decode"}, {"case", fmt::format("decode {} tokens", opt.decode_tokens)},
                    {"threads", default_threads()}, {"tokens_per_s", opt.decode_tokens / decode_s},
                    {"gbytes_per_s", gbps}, {"of_roof", gbps / roof_gbps},
                    {"mbytes_per_token", double(bytes) / opt.decode_tokens / 1e6}});
    return rows;
}

}  // namespace aqpim::cli
