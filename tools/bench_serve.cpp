// `aqpim bench serve`: the serving engine (src/serve) under a closed-loop load, every scheme side
// by side in one run with the same KV budget, prompt and output lengths: how many sequences fit,
// aggregate output tokens/s, time to first token and per output token (p50/p99), KV bytes per
// sequence. Each client submits its next request when the previous one ends (docs/serve.md); with
// --turns, its requests are the turns of conversations, and every scheme runs with the prompt
// cache off and on (and with --kv-store disk:DIR, on with the disk tier under it).

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/model.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "bench.h"
#include "serve/engine.h"
#include "store/tiers.h"

namespace aqpim::cli {

using json = nlohmann::ordered_json;

namespace {

double percentile(std::vector<double> x, double p) {
    if (x.empty()) return 0.0;
    std::sort(x.begin(), x.end());
    return x[std::min(x.size() - 1, std::size_t(p * double(x.size() - 1) + 0.5))];
}

/// The load of one scheme: clients closed-loop, `rounds` requests each or `requests` in all.
struct Load {
    std::mutex mu;
    std::condition_variable cv;
    int remaining = 0;  ///< requests not finished
    int unissued = 0;   ///< with --requests: requests not yet submitted
    int peak_active = 0;
    std::uint64_t peak_kv = 0;
    std::vector<double> ttft, tpot;
    std::vector<double> ttft_later;  ///< turns after a conversation's first
    std::uint64_t tokens = 0;
    std::string error;
    std::vector<std::vector<std::int32_t>> history;  ///< each client's conversation so far: prompt and output
};

/// `n` prompt tokens of a fixed rule of `salt` (ids in [3, n_vocab)).
void append_tokens(std::vector<std::int32_t>& out, int n, std::uint64_t salt, int n_vocab) {
    const std::size_t first = out.size();
    for (int i = 0; i < n; ++i)
        out.push_back(3 + std::int32_t((std::uint64_t(first + std::size_t(i)) * 2654435761u + salt * 40503u) %
                                       std::uint64_t(n_vocab - 3)));
}

/// Whether the client that finished its request of `round` sends another.
bool issue_another(Load& load, const ServeBenchOptions& opt, int round) {
    if (opt.requests == 0) return round + 1 < opt.rounds * opt.turns;
    std::lock_guard<std::mutex> lk(load.mu);
    if (load.unissued == 0) return false;
    --load.unissued;
    return true;
}

void submit_next(serve::Engine& e, Load& load, const ServeBenchOptions& opt, int n_vocab, int client, int round) {
    serve::GenerationRequest r;
    const int turn = round % opt.turns;
    const std::uint64_t salt = std::uint64_t(client * 97 + round);
    if (turn == 0) {
        r.prompt.push_back(1);
        append_tokens(r.prompt, opt.prompt_tokens - 1, salt, n_vocab);
    } else {
        std::lock_guard<std::mutex> lk(load.mu);
        r.prompt = load.history[std::size_t(client)];
        append_tokens(r.prompt, opt.turn_tokens, salt, n_vocab);
    }
    r.max_tokens = opt.output_tokens;
    r.sampler.temperature = 0.8f;
    r.sampler.seed = std::uint64_t(client) * 1000 + std::uint64_t(round);
    auto timer = std::make_shared<Timer>();
    auto first = std::make_shared<double>(-1.0);
    auto sequence = std::make_shared<std::vector<std::int32_t>>(r.prompt);
    const serve::SubmitResult res = e.submit(std::move(r), [&e, &load, &opt, n_vocab, client, round, turn, timer, first,
                                                            sequence](const serve::TokenEvent& ev) {
        if (ev.finish == serve::FinishReason::none) {
            const serve::EngineStats s = e.stats();
            std::lock_guard<std::mutex> lk(load.mu);
            ++load.tokens;
            sequence->push_back(ev.token);
            load.peak_active = std::max(load.peak_active, s.active);
            load.peak_kv = std::max(load.peak_kv, s.kv_bytes_used);
            if (ev.n_generated == 1) {
                *first = timer->seconds();
                (turn == 0 ? load.ttft : load.ttft_later).push_back(*first);
            } else if (ev.n_generated == opt.output_tokens) {
                load.tpot.push_back((timer->seconds() - *first) / (ev.n_generated - 1));
            }
            return false;
        }
        {
            std::lock_guard<std::mutex> lk(load.mu);
            if (ev.finish != serve::FinishReason::length)
                load.error = fmt::format("a request ended with {}: {}", serve::finish_reason_name(ev.finish), ev.error);
            load.history[std::size_t(client)] = std::move(*sequence);
        }
        if (issue_another(load, opt, round)) submit_next(e, load, opt, n_vocab, client, round + 1);
        std::lock_guard<std::mutex> lk(load.mu);
        if (--load.remaining == 0) load.cv.notify_all();
        return false;
    });
    AQPIM_CHECK(res.ok(), "bench serve: a request was refused: {}", res.message);
}

/// One scheme's closed-loop run: what the engine held and how its requests went.
struct SchemeRun {
    std::int64_t fit = 0;
    std::uint64_t per_seq = 0;
    int clients = 0, n_requests = 0, peak_active = 0;
    std::uint64_t peak_kv = 0, tokens = 0;
    double secs = 0;
    std::vector<double> ttft, tpot, ttft_later;
    std::uint64_t prefill_tokens = 0, decode_tokens = 0;
    double prefill_seconds = 0, decode_seconds = 0;
    std::uint64_t cache_hits = 0, cache_tokens = 0, disk_hits = 0;
    std::uint64_t store_tokens = 0;  ///< prompt tokens the prefix store restored (the disk tier's runs)

    /// Adds another pass of the same scheme.
    void add(const SchemeRun& o) {
        peak_active = std::max(peak_active, o.peak_active);
        peak_kv = std::max(peak_kv, o.peak_kv);
        tokens += o.tokens;
        secs += o.secs;
        ttft.insert(ttft.end(), o.ttft.begin(), o.ttft.end());
        tpot.insert(tpot.end(), o.tpot.begin(), o.tpot.end());
        ttft_later.insert(ttft_later.end(), o.ttft_later.begin(), o.ttft_later.end());
        cache_hits += o.cache_hits;
        cache_tokens += o.cache_tokens;
        disk_hits += o.disk_hits;
        store_tokens += o.store_tokens;
        prefill_tokens += o.prefill_tokens;
        decode_tokens += o.decode_tokens;
        prefill_seconds += o.prefill_seconds;
        decode_seconds += o.decode_seconds;
    }
};

/// A scheme, whether the engine keeps a prompt cache, and whether a disk tier takes what it drops.
struct Config {
    KvSchemeSpec scheme;
    bool cache_prompt = true;
    bool disk = false;
};

/// Run `run_index`'s directory below the disk tier's DIR, and its BYTES.
store::DiskSpec run_disk(const ServeBenchOptions& opt, int run_index) {
    const std::optional<store::DiskSpec> d = store::parse_disk_spec(opt.disk_tier);
    AQPIM_CHECK(d.has_value(), "bench serve: --kv-store {} with --turns: a disk:DIR[:BYTES] tier only", opt.disk_tier);
    return {(std::filesystem::path(d->dir) / fmt::format("bench-serve-{}", run_index)).string(), d->capacity_bytes};
}

SchemeRun run_scheme(const LoadedModel& m, const ServeBenchOptions& opt, const Config& config, int run_index) {
    SchemeRun run;
    serve::EngineOptions eo;
    eo.kv = config.scheme.text;
    eo.cache_prompt = config.cache_prompt;
    if (config.disk) {
        const store::DiskSpec d = run_disk(opt, run_index);
        eo.kv_store = {fmt::format("disk:{}:{}", d.dir, d.capacity_bytes)};
    }
    eo.kv_budget_bytes = opt.kv_budget_bytes;
    eo.ctx = opt.prompt_tokens + std::int64_t(opt.turns - 1) * opt.turn_tokens + std::int64_t(opt.turns) * opt.output_tokens;
    eo.threads = default_threads();
    eo.prefill_chunk = opt.prefill_chunk;
    // The sequences that fit, from the engine's own admission arithmetic.
    eo.parallel = 1;
    {
        serve::Engine probe(m.weights, eo);
        run.per_seq = probe.reservation_bytes(eo.ctx);
        const std::uint64_t base = probe.stats().kv_bytes_used;
        run.fit = opt.kv_budget_bytes > base ? std::int64_t((opt.kv_budget_bytes - base) / run.per_seq) : 0;
    }
    AQPIM_CHECK(run.fit > 0, "bench serve: not one sequence of {} tokens fits {} bytes under {}", eo.ctx,
                opt.kv_budget_bytes, eo.kv);
    run.clients = opt.clients > 0 ? opt.clients : int(std::min<std::int64_t>(run.fit, 4096));
    if (opt.requests > 0) run.clients = std::min(run.clients, opt.requests);
    eo.parallel = run.clients;
    eo.queue_capacity = run.clients;
    serve::Engine e(m.weights, eo);
    Load load;
    run.n_requests = opt.requests > 0 ? opt.requests : run.clients * opt.rounds * opt.turns;
    load.history.resize(std::size_t(run.clients));
    load.remaining = run.n_requests;
    load.unissued = run.n_requests - run.clients;
    const int n_vocab = m.weights.config.n_vocab;
    Timer wall;
    for (int c = 0; c < run.clients; ++c) submit_next(e, load, opt, n_vocab, c, 0);
    {
        std::unique_lock<std::mutex> lk(load.mu);
        load.cv.wait(lk, [&] { return load.remaining == 0; });
    }
    run.secs = wall.seconds();
    AQPIM_CHECK(load.error.empty(), "bench serve: {}: {}", eo.kv, load.error);
    const serve::EngineStats st = e.stats();
    run.peak_active = load.peak_active;
    run.peak_kv = load.peak_kv;
    run.tokens = load.tokens;
    run.ttft = std::move(load.ttft);
    run.tpot = std::move(load.tpot);
    run.ttft_later = std::move(load.ttft_later);
    run.cache_hits = st.prompt_cache.hits;
    run.cache_tokens = st.prompt_cache.tokens_reused;
    run.disk_hits = st.prompt_cache.disk_hits;
    if (st.store.prefix) run.store_tokens = st.store.prefix->tokens_restored;
    run.prefill_tokens = st.prefill_tokens;
    run.decode_tokens = st.decode_tokens;
    run.prefill_seconds = st.prefill_seconds;
    run.decode_seconds = st.decode_seconds;
    return run;
}

}  // namespace

json bench_serve(const ServeBenchOptions& opt) {
    AQPIM_CHECK(opt.turns == 1 || opt.requests == 0, "bench serve: --turns runs --rounds conversations per client, not --requests");
    if (!opt.disk_tier.empty()) (void)run_disk(opt, 0);  // a bad tier refused before any run
    const LoadedModel m = load_model(opt.model);
    std::vector<Config> configs;
    for (const KvSchemeSpec& scheme : parse_kv_schemes(opt.kv)) {
        // Without turns no prompt continues another: the cache would only hold finished sequences.
        configs.push_back({scheme, false});
        if (opt.turns > 1) configs.push_back({scheme, true});  // the cache's effect, in the same run
        if (!opt.disk_tier.empty()) configs.push_back({scheme, true, true});
    }
    const std::size_t n = configs.size();
    // Every pass runs every configuration once, forward on even passes and backward on odd ones, so
    // a drift of the machine's speed during the run falls on every one alike.
    std::vector<SchemeRun> total(n);
    std::vector<double> ratio_min(n, 0.0), ratio_max(n, 0.0);
    for (int pass = 0; pass < opt.passes; ++pass) {
        std::vector<double> tps(n);
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t is = pass % 2 == 0 ? k : n - 1 - k;
            const int run_index = pass * int(n) + int(k);
            const SchemeRun run = run_scheme(m, opt, configs[is], run_index);
            if (configs[is].disk) {  // the prefix blocks stored there would serve the next pass
                std::error_code ec;
                std::filesystem::remove_all(run_disk(opt, run_index).dir, ec);
            }
            tps[is] = double(run.tokens) / run.secs;
            if (pass == 0) total[is] = run;
            else total[is].add(run);
        }
        for (std::size_t is = 0; is < n; ++is) {
            const double r = tps[is] / tps[0];
            ratio_min[is] = pass == 0 ? r : std::min(ratio_min[is], r);
            ratio_max[is] = pass == 0 ? r : std::max(ratio_max[is], r);
        }
    }
    json rows = json::array();
    const double base_tps = double(total[0].tokens) / total[0].secs, base_fit = double(total[0].fit);
    const std::string base = configs[0].scheme.name;
    for (std::size_t is = 0; is < n; ++is) {
        const SchemeRun& r = total[is];
        const double tps = double(r.tokens) / r.secs;
        json row = {{"section", "serve"},
                    {"kv", configs[is].scheme.text},
                    {"prompt_cache", configs[is].cache_prompt},
                    {"fit", r.fit},
                    {"fit_vs_" + base, double(r.fit) / base_fit},
                    {"clients", r.clients},
                    {"requests", r.n_requests},
                    {"passes", opt.passes},
                    {"peak_active", r.peak_active},
                    {"out_tokens", r.tokens},
                    {"out_tok_s", tps},
                    {"tok_s_vs_" + base, tps / base_tps},
                    {"pass_ratio_min", ratio_min[is]},
                    {"pass_ratio_max", ratio_max[is]},
                    {"ttft_p50_s", percentile(r.ttft, 0.5)},
                    {"ttft_p99_s", percentile(r.ttft, 0.99)}};
        if (opt.turns > 1) {
            row["ttft_later_p50_s"] = percentile(r.ttft_later, 0.5);
            row["ttft_later_p99_s"] = percentile(r.ttft_later, 0.99);
            row["prompt_cache_hits"] = r.cache_hits;
            row["prompt_tokens_reused"] = r.cache_tokens;
            if (!opt.disk_tier.empty()) {
                row["disk_tier"] = configs[is].disk;
                row["prompt_cache_disk_hits"] = r.disk_hits;
                row["kv_store_tokens_restored"] = r.store_tokens;  // the tier also holds the prefix store's blocks
            }
        }
        row.update(json{{"tpot_p50_ms", 1e3 * percentile(r.tpot, 0.5)},
                        {"tpot_p99_ms", 1e3 * percentile(r.tpot, 0.99)},
                        {"kv_bytes_per_seq", r.per_seq},
                        {"kv_peak_mib", double(r.peak_kv) / 1048576.0},
                        {"prefill_tokens", r.prefill_tokens},
                        {"prefill_tok_s", r.prefill_tokens / std::max(r.prefill_seconds, 1e-9)},
                        {"decode_tok_s", r.decode_tokens / std::max(r.decode_seconds, 1e-9)},
                        {"wall_s", r.secs}});
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace aqpim::cli
