// `aqpim bench serve`: the serving engine (src/serve) under a closed-loop load, every scheme side
// by side in one run with the same KV budget, prompt and output lengths: how many sequences fit,
// aggregate output tokens/s, time to first token and per output token (p50/p99), KV bytes per
// sequence. Each client submits its next request when the previous one ends (docs/serve.md).

#include <fmt/format.h>

#include <algorithm>
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
    std::uint64_t tokens = 0;
    std::string error;
};

/// Whether the client that finished its request of `round` sends another.
bool issue_another(Load& load, const ServeBenchOptions& opt, int round) {
    if (opt.requests == 0) return round + 1 < opt.rounds;
    std::lock_guard<std::mutex> lk(load.mu);
    if (load.unissued == 0) return false;
    --load.unissued;
    return true;
}

void submit_next(serve::Engine& e, Load& load, const ServeBenchOptions& opt, int n_vocab, int client, int round) {
    serve::GenerationRequest r;
    r.prompt.push_back(1);
    for (int i = 1; i < opt.prompt_tokens; ++i)
        r.prompt.push_back(3 + std::int32_t((std::uint64_t(i) * 2654435761u + std::uint64_t(client * 97 + round) * 40503u) %
                                            std::uint64_t(n_vocab - 3)));
    r.max_tokens = opt.output_tokens;
    r.sampler.temperature = 0.8f;
    r.sampler.seed = std::uint64_t(client) * 1000 + std::uint64_t(round);
    auto timer = std::make_shared<Timer>();
    auto first = std::make_shared<double>(-1.0);
    const serve::SubmitResult res = e.submit(std::move(r), [&e, &load, &opt, n_vocab, client, round, timer, first](const serve::TokenEvent& ev) {
        if (ev.finish == serve::FinishReason::none) {
            const serve::EngineStats s = e.stats();
            std::lock_guard<std::mutex> lk(load.mu);
            ++load.tokens;
            load.peak_active = std::max(load.peak_active, s.active);
            load.peak_kv = std::max(load.peak_kv, s.kv_bytes_used);
            if (ev.n_generated == 1) {
                *first = timer->seconds();
                load.ttft.push_back(*first);
            } else if (ev.n_generated == opt.output_tokens) {
                load.tpot.push_back((timer->seconds() - *first) / (ev.n_generated - 1));
            }
            return false;
        }
        if (ev.finish != serve::FinishReason::length) {
            std::lock_guard<std::mutex> lk(load.mu);
            load.error = fmt::format("a request ended with {}: {}", serve::finish_reason_name(ev.finish), ev.error);
        }
        if (issue_another(load, opt, round)) submit_next(e, load, opt, n_vocab, client, round + 1);
        std::lock_guard<std::mutex> lk(load.mu);
        if (--load.remaining == 0) load.cv.notify_all();
        return false;
    });
    AQPIM_CHECK(res.ok(), "bench serve: a request was refused: {}", res.message);
}

}  // namespace

json bench_serve(const ServeBenchOptions& opt) {
    const LoadedModel m = load_model(opt.model);
    const int n_vocab = m.weights.config.n_vocab;
    const std::vector<KvSchemeSpec> schemes = parse_kv_schemes(opt.kv);
    json rows = json::array();
    double base_tps = 0, base_fit = 0;
    for (std::size_t is = 0; is < schemes.size(); ++is) {
        serve::EngineOptions eo;
        eo.kv = schemes[is].text;
        eo.kv_budget_bytes = opt.kv_budget_bytes;
        eo.ctx = opt.prompt_tokens + opt.output_tokens;
        eo.threads = default_threads();
        eo.prefill_chunk = opt.prefill_chunk;
        // The sequences that fit, from the engine's own admission arithmetic.
        eo.parallel = 1;
        std::int64_t fit = 0;
        std::uint64_t per_seq = 0;
        {
            serve::Engine probe(m.weights, eo);
            per_seq = probe.reservation_bytes(eo.ctx);
            const std::uint64_t base = probe.stats().kv_bytes_used;
            fit = opt.kv_budget_bytes > base ? std::int64_t((opt.kv_budget_bytes - base) / per_seq) : 0;
        }
        AQPIM_CHECK(fit > 0, "bench serve: not one sequence of {} tokens fits {} bytes under {}", eo.ctx,
                    opt.kv_budget_bytes, eo.kv);
        int clients = opt.clients > 0 ? opt.clients : int(std::min<std::int64_t>(fit, 4096));
        if (opt.requests > 0) clients = std::min(clients, opt.requests);
        eo.parallel = clients;
        eo.queue_capacity = clients;
        serve::Engine e(m.weights, eo);
        Load load;
        const int n_requests = opt.requests > 0 ? opt.requests : clients * opt.rounds;
        load.remaining = n_requests;
        load.unissued = n_requests - clients;
        Timer wall;
        for (int c = 0; c < clients; ++c) submit_next(e, load, opt, n_vocab, c, 0);
        {
            std::unique_lock<std::mutex> lk(load.mu);
            load.cv.wait(lk, [&] { return load.remaining == 0; });
        }
        const double secs = wall.seconds();
        AQPIM_CHECK(load.error.empty(), "bench serve: {}: {}", eo.kv, load.error);
        const serve::EngineStats st = e.stats();
        const double tps = double(load.tokens) / secs;
        if (is == 0) base_tps = tps, base_fit = double(fit);
        rows.push_back({{"section", "serve"},
                        {"kv", eo.kv},
                        {"fit", fit},
                        {"fit_vs_" + schemes[0].name, double(fit) / base_fit},
                        {"clients", clients},
                        {"requests", n_requests},
                        {"peak_active", load.peak_active},
                        {"out_tokens", load.tokens},
                        {"out_tok_s", tps},
                        {"tok_s_vs_" + schemes[0].name, tps / base_tps},
                        {"ttft_p50_s", percentile(load.ttft, 0.5)},
                        {"ttft_p99_s", percentile(load.ttft, 0.99)},
                        {"tpot_p50_ms", 1e3 * percentile(load.tpot, 0.5)},
                        {"tpot_p99_ms", 1e3 * percentile(load.tpot, 0.99)},
                        {"kv_bytes_per_seq", per_seq},
                        {"kv_peak_mib", double(load.peak_kv) / 1048576.0},
                        {"prefill_tok_s", st.prefill_tokens / std::max(st.prefill_seconds, 1e-9)},
                        {"decode_tok_s", st.decode_tokens / std::max(st.decode_seconds, 1e-9)},
                        {"wall_s", secs}});
    }
    return rows;
}

}  // namespace aqpim::cli
