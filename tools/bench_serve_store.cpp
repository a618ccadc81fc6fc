// `aqpim bench serve --kv-store ...`: the KV prefix store (docs/kv-store.md), every scheme in one
// run. Per scheme: the bytes a 1K-token stretch of blocks takes when stored (as aqpim counts them
// and as each tier itself accounts them: Redis's MEMORY USAGE, the files' blocks) and when read
// back; the time to first token for a shared prefix without a store and on a hit in each tier
// (memory in the same server; disk and Redis from a fresh one, as a replica or a restart finds
// them); and under a closed loop of requests that share a few system prompts, the hit rate and the
// throughput against the same loop without a store.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/model.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "bench.h"
#include "serve/engine.h"

namespace aqpim::cli {

using json = nlohmann::ordered_json;

namespace {

/// Token ids of a pseudo-random text: `salt` picks the text.
std::vector<std::int32_t> tokens(int n, std::uint64_t salt, int n_vocab) {
    std::vector<std::int32_t> t;
    for (int i = 0; i < n; ++i)
        t.push_back(3 + std::int32_t((std::uint64_t(i) * 2654435761u + salt * 40503u + (salt >> 16)) % std::uint64_t(n_vocab - 3)));
    return t;
}

/// prefix (BOS, then text `prefix_salt`) and a suffix of text `suffix_salt`.
std::vector<std::int32_t> prompt(int prefix, std::uint64_t prefix_salt, int suffix, std::uint64_t suffix_salt, int n_vocab) {
    std::vector<std::int32_t> p = tokens(prefix, prefix_salt, n_vocab);
    p[0] = 1;
    const std::vector<std::int32_t> s = tokens(suffix, suffix_salt + 1000003, n_vocab);
    p.insert(p.end(), s.begin(), s.end());
    return p;
}

double median(std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x.empty() ? 0.0 : x[x.size() / 2];
}

/// Run one request to its end; seconds to its first token.
double time_to_first_token(serve::Engine& e, std::vector<std::int32_t> prompt_ids, int max_tokens) {
    serve::GenerationRequest r;
    r.prompt = std::move(prompt_ids);
    r.max_tokens = max_tokens;
    r.sampler.temperature = 0.0f;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    double ttft = -1;
    std::string error;
    Timer t;
    const serve::SubmitResult res = e.submit(std::move(r), [&](const serve::TokenEvent& ev) {
        std::lock_guard<std::mutex> lk(mu);
        if (ev.finish == serve::FinishReason::none) {
            if (ttft < 0) ttft = t.seconds();
        } else {
            if (ev.finish != serve::FinishReason::length) error = ev.error.empty() ? serve::finish_reason_name(ev.finish) : ev.error;
            done = true;
            cv.notify_all();
        }
        return false;
    });
    AQPIM_CHECK(res.ok(), "bench serve: a request was refused: {}", res.message);
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done; });
    AQPIM_CHECK(error.empty(), "bench serve: a request ended with {}", error);
    return ttft;
}

struct SchemeRun {
    const ModelWeights& weights;
    const StoreBenchOptions& opt;
    std::string kv;
    int n_vocab;

    serve::EngineOptions engine_options(std::vector<std::string> store, std::int64_t ctx) const {
        serve::EngineOptions eo;
        eo.kv = kv;
        eo.kv_budget_bytes = opt.kv_budget_bytes;
        eo.ctx = ctx;
        eo.threads = default_threads();
        eo.parallel = std::max(1, opt.clients);
        eo.queue_capacity = std::max(opt.requests, 1);
        eo.prefill_chunk = opt.prefill_chunk;
        eo.kv_store = std::move(store);
        eo.kv_store_block = opt.block_tokens;
        eo.kv_store_tail_every = opt.tail_every;
        return eo;
    }
    std::int64_t ttft_context() const { return opt.prefix_tokens + opt.suffix_tokens + 2; }

    /// A text no earlier run stored (tiers on disk and in Redis outlive a run).
    std::uint64_t run_salt = std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) & 0xffffffffu;

    /// Bytes stored and read back per 1K tokens of blocks, with each tier's own accounting.
    json bytes_row(std::uint64_t* stored_per_1k) const {
        const std::vector<std::int32_t> p = prompt(opt.prefix_tokens, run_salt, opt.suffix_tokens, 1, n_vocab);
        serve::Engine writer(weights, engine_options(opt.kv_store, ttft_context()));
        time_to_first_token(writer, p, 1);
        writer.flush_store();
        const store::PrefixStoreStats w = *writer.stats().store.prefix;
        AQPIM_CHECK(w.blocks_stored > 0, "bench serve: no block was stored under {} (prompt shorter than a block?)", kv);
        const double stored_k = double(w.blocks_stored) * opt.block_tokens / 1024.0;
        serve::Engine reader(weights, engine_options(opt.kv_store, ttft_context()));
        time_to_first_token(reader, p, 1);
        const store::PrefixStoreStats r = *reader.stats().store.prefix;
        json row = {{"section", "store bytes"},
                    {"kv", kv},
                    {"block_tokens", opt.block_tokens},
                    {"blocks", w.blocks_stored},
                    {"stored_kib_per_1k", double(w.bytes_stored) / stored_k / 1024.0}};
        *stored_per_1k = std::uint64_t(double(w.bytes_stored) / stored_k);
        const std::vector<std::uint64_t> reported = writer.store_reported_bytes(p);
        for (std::size_t t = 0; t < reported.size(); ++t)
            row[w.tiers[t].tier + "_reported_kib_per_1k"] = double(reported[t]) / stored_k / 1024.0;
        row["read_kib_per_1k"] = r.tokens_restored > 0 ? double(r.bytes_fetched) / (double(r.tokens_restored) / 1024.0) / 1024.0 : 0.0;
        row["restored_tokens"] = r.tokens_restored;
        return row;
    }

    /// TTFT of the shared prefix + a new suffix: fresh, then on a hit in each tier alone.
    json ttft_row() const {
        json row = {{"section", "ttft"}, {"kv", kv}, {"prompt_tokens", opt.prefix_tokens + opt.suffix_tokens}};
        std::uint64_t salt = 100;
        const std::uint64_t text = run_salt + 1;
        std::vector<double> fresh;
        {
            serve::Engine e(weights, engine_options({}, ttft_context()));
            for (int i = 0; i < opt.repeats; ++i)
                fresh.push_back(time_to_first_token(e, prompt(opt.prefix_tokens, text, opt.suffix_tokens, salt++, n_vocab), 1));
        }
        row["fresh_s"] = median(fresh);
        for (const std::string& tier : opt.kv_store) {
            std::vector<double> hit;
            const bool shared = !tier.starts_with("memory");  // disk and Redis outlive the server: read by a fresh one
            serve::Engine primer(weights, engine_options({tier}, ttft_context()));
            time_to_first_token(primer, prompt(opt.prefix_tokens, text, opt.suffix_tokens, salt++, n_vocab), 1);
            primer.flush_store();
            for (int i = 0; i < opt.repeats; ++i) {
                if (shared) {
                    serve::Engine e(weights, engine_options({tier}, ttft_context()));
                    hit.push_back(time_to_first_token(e, prompt(opt.prefix_tokens, text, opt.suffix_tokens, salt++, n_vocab), 1));
                    AQPIM_CHECK(e.stats().store.prefix->lookup_hits == 1, "bench serve: {} under {}: no hit", tier, kv);
                } else {
                    hit.push_back(time_to_first_token(primer, prompt(opt.prefix_tokens, text, opt.suffix_tokens, salt++, n_vocab), 1));
                }
            }
            const std::string name = tier.substr(0, tier.find(':'));
            row["hit_" + name + "_s"] = median(hit);
            row["speedup_" + name] = median(fresh) / std::max(median(hit), 1e-9);
        }
        return row;
    }

    /// `requests` requests over `clients` closed-loop clients, each a system prompt drawn from
    /// `shared_prefixes` plus its own text; with and without the store.
    json workload_row() const {
        const std::int64_t ctx = opt.workload_prefix_tokens + opt.workload_suffix_tokens + opt.output_tokens + 2;
        json row = {{"section", "workload"}, {"kv", kv}, {"requests", opt.requests}, {"system_prompts", opt.shared_prefixes}};
        for (const bool with_store : {false, true}) {
            serve::Engine e(weights, engine_options(with_store ? opt.kv_store : std::vector<std::string>{}, ctx));
            std::mutex mu;
            std::condition_variable cv;
            int next = 0, finished = 0;
            std::uint64_t out_tokens = 0;
            std::vector<double> ttft;
            std::function<void()> submit_one;
            submit_one = [&] {
                int i;
                {
                    std::lock_guard<std::mutex> lk(mu);
                    if (next >= opt.requests) return;
                    i = next++;
                }
                serve::GenerationRequest r;
                r.prompt = prompt(opt.workload_prefix_tokens, run_salt + 2 + std::uint64_t(i % opt.shared_prefixes),
                                  opt.workload_suffix_tokens, 5000 + std::uint64_t(i), n_vocab);
                r.max_tokens = opt.output_tokens;
                r.sampler.temperature = 0.0f;
                auto t = std::make_shared<Timer>();
                const serve::SubmitResult res = e.submit(std::move(r), [&, t](const serve::TokenEvent& ev) {
                    if (ev.finish == serve::FinishReason::none) {
                        std::lock_guard<std::mutex> lk(mu);
                        ++out_tokens;
                        if (ev.n_generated == 1) ttft.push_back(t->seconds());
                        return false;
                    }
                    submit_one();
                    std::lock_guard<std::mutex> lk(mu);
                    ++finished;
                    cv.notify_all();
                    return false;
                });
                AQPIM_CHECK(res.ok(), "bench serve: a request was refused: {}", res.message);
            };
            Timer wall;
            for (int c = 0; c < opt.clients; ++c) submit_one();
            {
                std::unique_lock<std::mutex> lk(mu);
                cv.wait(lk, [&] { return finished == opt.requests; });
            }
            const double secs = wall.seconds();
            const std::string tag = with_store ? "store_" : "nostore_";
            row[tag + "out_tok_s"] = double(out_tokens) / secs;
            row[tag + "ttft_p50_s"] = median(ttft);
            if (with_store) {
                const store::PrefixStoreStats s = *e.stats().store.prefix;
                row["hit_rate"] = s.lookups > 0 ? double(s.lookup_hits) / double(s.lookups) : 0.0;
                row["prompt_tokens_restored_pct"] =
                    100.0 * double(s.tokens_restored) /
                    (double(opt.requests) * (opt.workload_prefix_tokens + opt.workload_suffix_tokens));
                row["tok_s_vs_nostore"] = row["store_out_tok_s"].get<double>() / row["nostore_out_tok_s"].get<double>();
            }
        }
        return row;
    }
};

}  // namespace

json bench_serve_store(const StoreBenchOptions& opt) {
    AQPIM_CHECK(!opt.kv_store.empty(), "bench serve: --kv-store names no tier");
    AQPIM_CHECK(opt.prefix_tokens >= opt.block_tokens, "bench serve: --prompt-tokens {} is shorter than a block of {}",
                opt.prefix_tokens, opt.block_tokens);
    AQPIM_CHECK(opt.shared_prefixes >= 1 && opt.requests >= 1 && opt.clients >= 1 && opt.repeats >= 1,
                "bench serve: --shared-prefixes, --requests, --clients and --repeats must be >= 1");
    const LoadedModel m = load_model(opt.model);
    const int n_vocab = m.weights.config.n_vocab;
    json rows = json::array();
    std::uint64_t base_stored = 0;
    std::string base_kv;
    for (const KvSchemeSpec& spec : parse_kv_schemes(opt.kv)) {
        const SchemeRun run{m.weights, opt, spec.text, n_vocab};
        std::uint64_t stored = 0;
        json bytes = run.bytes_row(&stored);
        if (base_kv.empty()) base_kv = spec.text, base_stored = stored;
        bytes["x_smaller_than_" + base_kv] = double(base_stored) / double(std::max<std::uint64_t>(stored, 1));
        rows.push_back(bytes);
        rows.push_back(run.ttft_row());
        rows.push_back(run.workload_row());
    }
    return rows;
}

}  // namespace aqpim::cli
