// `aqpim bench pq`: the PQ engine's benchmarks, each subject beside its baseline in one run.

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aqpim/byte_size.h"
#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "bench.h"
#include "commands.h"

namespace aqpim::cli {

namespace {

using json = nlohmann::ordered_json;

std::string cell(const json& v) {
    if (v.is_number_float()) {
        const double x = v.get<double>();
        if (x != 0 && (std::abs(x) < 0.01 || std::abs(x) >= 1e6)) return fmt::format("{:.3e}", x);
        return fmt::format("{:.3f}", x);
    }
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) return "-";
    return v.dump();
}

// One aligned table per section; columns in order of first appearance.
void print_tables(const json& rows) {
    std::vector<std::string> sections;
    for (const auto& r : rows)
        if (std::find(sections.begin(), sections.end(), r["section"].get<std::string>()) == sections.end())
            sections.push_back(r["section"]);
    for (const auto& sec : sections) {
        std::vector<std::string> cols;
        for (const auto& r : rows)
            if (r["section"] == sec)
                for (auto it = r.begin(); it != r.end(); ++it)
                    if (it.key() != "section" && std::find(cols.begin(), cols.end(), it.key()) == cols.end())
                        cols.push_back(it.key());
        std::vector<std::vector<std::string>> table{cols};
        for (const auto& r : rows)
            if (r["section"] == sec) {
                std::vector<std::string> line;
                for (const auto& c : cols) line.push_back(r.contains(c) ? cell(r[c]) : "");
                table.push_back(line);
            }
        std::vector<std::size_t> width(cols.size(), 0);
        for (const auto& line : table)
            for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
        fmt::print("\n== {} ==\n", sec);
        for (const auto& line : table) {
            for (std::size_t i = 0; i < line.size(); ++i) fmt::print("{:>{}}  ", line[i], width[i]);
            fmt::print("\n");
        }
    }
}

}  // namespace

void print_bench_tables(const json& rows) { print_tables(rows); }

void add_bench_cuda_command(CLI::App& bench);      // tools/bench_cuda.cpp
void add_bench_kv_state_command(CLI::App& bench);  // tools/bench_kv_state.cpp

void add_bench_command(CLI::App& app) {
    auto* bench = app.add_subcommand("bench", "benchmarks (each against its baseline in the same run)");
    bench->require_subcommand(1);
    auto* pq = bench->add_subcommand("pq", "PQ engine: k-means vs faiss, encode, scan, value paths, GQA attention vs dense");
    struct Args {
        bool json = false, quick = false;
        std::vector<std::string> sections;
        std::string out;
    };
    auto args = std::make_shared<Args>();
    pq->add_flag("--json", args->json, "print JSON instead of tables");
    pq->add_flag("--quick", args->quick, "small sizes and short runs (smoke test)");
    pq->add_option("--sections", args->sections, "subset: bandwidth,kmeans,encode,scan,int8_error,values,stages,attention")
        ->delimiter(',')
        ->check(CLI::IsMember({"bandwidth", "kmeans", "encode", "scan", "int8_error", "values", "stages", "attention"}));
    pq->add_option("-o,--out", args->out, "also write the JSON to this file");
    pq->callback([args] {
        // The output is opened first: an unwritable path fails now, not after minutes of benchmarks.
        std::optional<OutputFile> out;
        if (!args->out.empty()) out.emplace(args->out, "-o");
        BenchOptions opt;
        opt.quick = args->quick;
        opt.max_threads = default_threads();
        auto wanted = [&](const char* s) {
            return args->sections.empty() || std::find(args->sections.begin(), args->sections.end(), s) != args->sections.end();
        };
        json rows = json::array();
        auto add = [&](const char* name, json (*fn)(const BenchOptions&)) {
            if (!wanted(name)) return;
            if (!args->json) fmt::print(stderr, "bench: {} ...\n", name);
            for (auto& r : fn(opt)) rows.push_back(r);
        };
        add("bandwidth", bench_bandwidth);
        add("kmeans", bench_kmeans);
        add("encode", bench_encode);
        add("scan", bench_scan);
        add("int8_error", bench_int8_error);
        add("values", bench_values);
        add("stages", bench_stages);
        add("attention", bench_attention);
        json report = {{"simd", simd_level_name(active_simd_level())}, {"threads", opt.max_threads}, {"quick", opt.quick},
                       {"rows", rows}};
        if (out) {
            out->stream() << report.dump(2) << "\n";
            out->commit();
        }
        if (args->json)
            fmt::print("{}\n", report.dump(2));
        else
            print_tables(rows);
    });

    auto* decode = bench->add_subcommand("decode", "a model's prefill and decode speed vs the read roof of this machine");
    auto dopt = std::make_shared<DecodeBenchOptions>();
    auto djson = std::make_shared<bool>(false);
    decode->add_option("-m,--model", dopt->model, "model file or directory (see `aqpim synth` for large shapes)")->required();
    decode->add_option("--prompt-tokens", dopt->prompt_tokens, "prefill length")->check(CLI::Range(1, 1 << 20));
    decode->add_option("-n,--decode-tokens", dopt->decode_tokens, "decode steps")->check(CLI::Range(1, 1 << 20));
    decode->add_flag("--json", *djson, "print JSON instead of tables");
    decode->add_flag("--quick", dopt->quick, "smaller cold arena for the read roof (smoke test)");
    auto* contexts = decode->add_option("--contexts", dopt->contexts,
                       "KV-dominated mode: fill each sequence to these contexts (generated K/V) and time decode per scheme")
        ->delimiter(',')
        ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 24));
    decode->add_option("--batch", dopt->batches, "KV-dominated mode: sequences per step (list)")
        ->delimiter(',')
        ->check(CLI::Range(1, 4096))
        ->needs(contexts);
    decode->add_option("--kv", dopt->kv, "KV-dominated mode: schemes, ';'-separated, the first is the baseline")
        ->capture_default_str()
        ->needs(contexts);
    decode->add_flag("--batch-invariant", dopt->batch_invariant,
                     "KV-dominated mode: decode as `aqpim serve` does, each projection row with one arithmetic "
                     "whatever the batch (a sequence's tokens do not depend on it) instead of the batched GEMM")
        ->needs(contexts);
    decode->add_flag("--sequential", dopt->sequential,
                     "KV-dominated mode: fill and time one scheme after another (holds one cache at a time) instead "
                     "of interleaving every scheme's steps (holds all caches; drift on a shared machine cancels in "
                     "the ratios)")
        ->needs(contexts);
    decode->callback([dopt, djson] {
        const json rows = dopt->contexts.empty() ? bench_decode(*dopt) : bench_kv_decode(*dopt);
        if (*djson)
            fmt::print("{}\n", json{{"simd", simd_level_name(active_simd_level())}, {"rows", rows}}.dump(2));
        else
            print_tables(rows);
    });
    auto* serve = bench->add_subcommand("serve", "the serving engine under closed-loop load, every scheme in one KV budget");
    auto sopt = std::make_shared<ServeBenchOptions>();
    auto sbudget = std::make_shared<std::string>("64MiB");
    auto sjson = std::make_shared<bool>(false);
    serve->add_option("-m,--model", sopt->model, "model file or directory")->required();
    serve->add_option("--kv", sopt->kv, "schemes, ';'-separated, the first is the baseline")->capture_default_str();
    serve->add_option("--kv-budget", *sbudget, "KV bytes of all sequences together (e.g. 64MiB)")->capture_default_str();
    serve->add_option("--prompt-tokens", sopt->prompt_tokens, "prompt length")->check(CLI::Range(1, 1 << 20));
    serve->add_option("-n,--output-tokens", sopt->output_tokens, "tokens generated per request")->check(CLI::Range(2, 1 << 20));
    serve->add_option("--clients", sopt->clients, "concurrent clients (0: as many sequences as fit)")->check(CLI::Range(0, 4096));
    serve->add_option("--rounds", sopt->rounds, "requests per client (the first round is one wave of every client)")->check(CLI::Range(1, 1000));
    serve->add_option("--prefill-chunk", sopt->prefill_chunk, "prompt tokens prefilled per step")->check(CLI::Range(1, 1 << 20));
    serve->add_option("--turns", sopt->turns,
                      "turns of each conversation (--rounds conversations per client); more than 1: every scheme runs "
                      "with the prompt cache off and on")
        ->check(CLI::Range(1, 1000));
    serve->add_option("--turn-tokens", sopt->turn_tokens, "new prompt tokens of each turn after the first")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    serve->add_option("--passes", sopt->passes,
                      "runs of every scheme, the order reversed every other pass (rows sum them; pass_ratio_min/max)")
        ->check(CLI::Range(1, 100));
    serve->add_flag("--json", *sjson, "print JSON instead of tables");
    // With --kv-store: the prefix store's benchmark (bench_serve_store.cpp); the options above keep
    // their meaning where they have one (--prompt-tokens: the shared prefix, -n: tokens per request).
    auto store = std::make_shared<StoreBenchOptions>();
    serve->add_option("--kv-store", store->kv_store, "KV store tiers to measure (repeatable): memory, disk:DIR, redis://HOST:PORT; with --turns, "
                      "one disk:DIR[:BYTES] tier for the sequences the prompt cache drops");
    serve->add_option("--kv-store-block", store->block_tokens, "tokens per stored block")->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    serve->add_option("--kv-store-tail-every", store->tail_every, "a block's tail stored every N blocks")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    serve->add_option("--suffix-tokens", store->suffix_tokens, "--kv-store: each request's own tokens after the shared prefix")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    serve->add_option("--repeats", store->repeats, "--kv-store: TTFT samples per tier")->capture_default_str()
        ->check(CLI::Range(1, 100));
    serve->add_option("--workload-prefix-tokens", store->workload_prefix_tokens, "--kv-store: system prompt length of the workload")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    serve->add_option("--workload-suffix-tokens", store->workload_suffix_tokens,
                      "--kv-store: each workload request's own tokens after its system prompt")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    serve->add_option("--shared-prefixes", store->shared_prefixes, "--kv-store: system prompts the workload shares")
        ->capture_default_str()->check(CLI::Range(1, 1 << 16));
    serve->add_option("--requests", sopt->requests,
                      "requests per scheme in all, to whichever client is free, instead of --rounds (with --kv-store: "
                      "requests of the workload, default 24)")
        ->check(CLI::Range(1, 1 << 20))->excludes("--rounds")->excludes("--turns");
    serve->callback([serve, sopt, sbudget, sjson, store] {
        sopt->kv_budget_bytes = parse_byte_size(*sbudget, "--kv-budget");
        AQPIM_CHECK(store->kv_store.empty() || serve->count("--turns") == 0 || sopt->turns > 1,
                    "bench serve: --kv-store with --turns needs more than one turn (the prompt cache's disk tier)");
        if (!store->kv_store.empty() && sopt->turns > 1) {  // the prompt cache's disk tier
            AQPIM_CHECK(store->kv_store.size() == 1, "bench serve: --turns takes one --kv-store (disk:DIR[:BYTES])");
            for (const char* o : {"--kv-store-block", "--kv-store-tail-every", "--suffix-tokens", "--repeats",
                                  "--workload-prefix-tokens", "--workload-suffix-tokens", "--shared-prefixes"})
                AQPIM_CHECK(serve->count(o) == 0, "bench serve: {} is for the store's benchmark, not with --turns", o);
            sopt->disk_tier = store->kv_store[0];
        } else if (!store->kv_store.empty()) {
            AQPIM_CHECK(serve->count("--passes") == 0,
                        "bench serve: --passes is for the load without --kv-store (the store's TTFT has --repeats)");
            store->model = sopt->model;
            if (serve->count("--kv") > 0) store->kv = sopt->kv;
            if (serve->count("--kv-budget") > 0) store->kv_budget_bytes = sopt->kv_budget_bytes;
            if (serve->count("--prompt-tokens") > 0) store->prefix_tokens = sopt->prompt_tokens;
            if (serve->count("--output-tokens") > 0) store->output_tokens = sopt->output_tokens;
            if (serve->count("--clients") > 0) store->clients = sopt->clients;
            if (serve->count("--prefill-chunk") > 0) store->prefill_chunk = sopt->prefill_chunk;
            if (serve->count("--requests") > 0) store->requests = sopt->requests;
            const json rows = bench_serve_store(*store);
            if (*sjson)
                fmt::print("{}\n", json{{"simd", simd_level_name(active_simd_level())}, {"rows", rows}}.dump(2));
            else
                print_tables(rows);
            return;
        }
        const json rows = bench_serve(*sopt);
        if (*sjson)
            fmt::print("{}\n", json{{"simd", simd_level_name(active_simd_level())}, {"rows", rows}}.dump(2));
        else
            print_tables(rows);
    });
    add_bench_cuda_command(*bench);
    add_bench_kv_state_command(*bench);
}

}  // namespace aqpim::cli
