// `aqpim bench kv-state`: bytes of a saved sequence state per scheme beside what memory() counts,
// and save / restore time beside a memcpy of the same bytes in the same run (docs/kv-state.md).

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "aqpim/file_io.h"
#include "aqpim/kv_state.h"
#include "aqpim/model.h"
#include "aqpim/timer.h"
#include "aqpim/transformer.h"
#include "bench.h"

namespace aqpim::cli {

namespace {

using json = nlohmann::ordered_json;

struct KvStateBenchOptions {
    std::string model, text;
    int tokens = 1024;
    std::string kv = "f16;q8_0;q4_0;kivi2;pq;pq:refresh=0,bits=2,cb=f16,wq=q8_0,window=128";
    double min_seconds = 0.3;  ///< each timing repeats until this much time passed (at least 3 runs)
};

/// Fastest of the runs of f (at least 3, until min_seconds in all).
template <class F>
double best_seconds(double min_seconds, F&& f) {
    double best = 1e30, total = 0;
    for (int rep = 0; rep < 3 || total < min_seconds; ++rep) {
        Timer t;
        f();
        const double s = t.seconds();
        best = std::min(best, s);
        total += s;
    }
    return best;
}

/// The first n tokens of the text (BOS first), or random ids without one.
std::vector<std::int32_t> bench_tokens(const LoadedModel& m, const std::string& text, int n) {
    std::vector<std::int32_t> ids;
    if (!text.empty()) {
        AQPIM_CHECK(m.tokenizer, "bench kv-state: the model has no vocabulary to tokenize -f with");
        ids = m.tokenizer->encode(read_whole_file(text, "-f"), true);
        AQPIM_CHECK(std::int64_t(ids.size()) >= n, "bench kv-state: -f {} has {} tokens, fewer than --tokens {}", text,
                    ids.size(), n);
        ids.resize(std::size_t(n));
        return ids;
    }
    std::mt19937 rng(5);
    for (int i = 0; i < n; ++i) ids.push_back(std::int32_t(rng() % unsigned(m.weights.config.n_vocab)));
    return ids;
}

json bench_kv_state(const KvStateBenchOptions& o) {
    const LoadedModel m = load_model(o.model);
    Transformer t(m.weights);
    const KvShape shape = t.kv_shape();
    const std::vector<std::int32_t> ids = bench_tokens(m, o.text, o.tokens);
    json rows = json::array();

    ModelIdentity id;
    const double hash_s = best_seconds(o.min_seconds, [&] { id = model_identity(m.weights); });
    const double weight_bytes = double(m.weights.weight_bytes());
    rows.push_back({{"section", "model identity"}, {"model", m.weights.config.name}, {"weight_mib", weight_bytes / 1048576},
                    {"ms", hash_s * 1e3}, {"gbytes_per_s", weight_bytes / hash_s / 1e9}});

    std::vector<float> logits;
    for (const KvSchemeSpec& spec : parse_kv_schemes(o.kv)) {
        const KvCacheOptions ko{0, o.tokens};
        std::unique_ptr<KvCache> cache = make_kv_cache(spec, shape, ko);
        cache->add_sequence(0);
        // Prefill all but the last token, then one decode step: the state a server slot holds.
        const BatchSequence pre{0, std::span(ids).first(ids.size() - 1), false}, step{0, std::span(ids).last(1), false};
        t.forward({&pre, 1}, *cache, logits);
        t.forward({&step, 1}, *cache, logits);
        const KvMemory mem = cache->memory();
        std::uint64_t held = mem.bytes;
        for (const auto& [part, b] : mem.parts)
            if (part == "free pool pages") held -= b;
        SlotState slot{ids, std::int64_t(ids.size()), Sampler(SamplerParams{}).state()};

        std::vector<std::uint8_t> bytes;
        const double save_s = best_seconds(o.min_seconds, [&] { bytes = save_kv_state(*cache, 0, slot, id, ko.context); });
        // Restored into one cache again and again (its pages come back from the free list, as in a server).
        std::unique_ptr<KvCache> dst = make_kv_cache(spec, shape, ko);
        const double restore_s = best_seconds(o.min_seconds, [&] {
            restore_kv_state(bytes, *dst, 0, id);
            dst->remove_sequence(0);
        });
        const RestoredKvState back = load_kv_state(bytes, {&id, &shape, 0});
        AQPIM_CHECK(back.cache->memory().bytes == held, "bench kv-state: {}: restored memory() {} != saved {}",
                    spec.text, back.cache->memory().bytes, held);
        std::vector<std::uint8_t> copy(bytes.size());
        const double copy_s = best_seconds(o.min_seconds, [&] { std::memcpy(copy.data(), bytes.data(), bytes.size()); });
        const double mb = double(bytes.size()) / 1e6;
        rows.push_back({{"section", "kv state"}, {"kv", cache->scheme()}, {"tokens", o.tokens},
                        {"memory_bytes", held}, {"bits_per_element", mem.bits_per_element(shape)},
                        {"state_bytes", bytes.size()}, {"state_vs_memory", double(bytes.size()) / double(held)},
                        {"save_ms", save_s * 1e3}, {"save_mb_per_s", mb / save_s},
                        {"restore_ms", restore_s * 1e3}, {"restore_mb_per_s", mb / restore_s},
                        {"memcpy_mb_per_s", mb / copy_s}, {"restore_vs_memcpy", restore_s / copy_s}});
    }
    return rows;
}

}  // namespace

void add_bench_kv_state_command(CLI::App& bench) {
    auto* cmd = bench.add_subcommand("kv-state", "saved sequence state per scheme: bytes vs memory(), save/restore time");
    auto o = std::make_shared<KvStateBenchOptions>();
    auto as_json = std::make_shared<bool>(false);
    cmd->add_option("-m,--model", o->model, "model file or directory")->required();
    cmd->add_option("-f,--file", o->text, "text whose first tokens fill the sequence (default: random token ids)");
    cmd->add_option("--tokens", o->tokens, "tokens in the sequence")->check(CLI::Range(2, 1 << 20));
    cmd->add_option("--kv", o->kv, "schemes, ';'-separated")->capture_default_str();
    cmd->add_option("--min-seconds", o->min_seconds, "time each measurement repeats for (at least 3 runs)")
        ->check(CLI::Range(0.0, 60.0));
    cmd->add_flag("--json", *as_json, "print JSON instead of tables");
    cmd->callback([o, as_json] {
        const json rows = bench_kv_state(*o);
        if (*as_json)
            fmt::print("{}\n", json{{"rows", rows}}.dump(2));
        else
            print_bench_tables(rows);
    });
}

}  // namespace aqpim::cli
