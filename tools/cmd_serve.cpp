// aqpim serve: the OpenAI-compatible HTTP server over the serving engine (docs/serve.md).

#include <csignal>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "aqpim/byte_size.h"
#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "commands.h"
#include "model_options.h"
#include "serve/engine.h"
#include "serve/http_server.h"

namespace aqpim::cli {

namespace {

struct ServeOptions {
    ModelOptions model;
    std::string kv_budget = "1GiB";
    serve::EngineOptions engine;
    serve::ServerOptions server;
};

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

void run_serve(const ServeOptions& o) {
    // SIGINT and SIGTERM set a flag (all a handler may safely do) that a watcher thread turns into
    // server.stop(); the threads OpenMP already started cannot be relied on to block them.
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client gone away is a failed write, not the end of the server

    LoadedModel m = load_model_for_cli(o.model);
    AQPIM_CHECK(m.tokenizer, "serve: {} has no vocabulary (give --tokenizer)", o.model.model);
    serve::EngineOptions eo = o.engine;
    eo.kv = o.model.kv;
    eo.kv_budget_bytes = parse_byte_size(o.kv_budget, "--kv-budget");
    eo.eos_token = m.tokenizer->eos();
    eo.warn = [](const std::string& line) { fmt::print(stderr, "aqpim serve: warning: {}\n", line); };
    (void)parse_kv_scheme(eo.kv);  // a bad --kv names itself before anything starts
    serve::Engine engine(m.weights, eo);
    serve::HttpServer server(engine, m.tokenizer, m.weights.config, o.server);
    const int port = server.bind();
    std::string stores;
    for (const std::string& t : eo.kv_store) stores += (stores.empty() ? ", kv store " : " then ") + t;
    fmt::print(stderr, "aqpim serve: listening on http://{}:{} (kv {}, budget {} bytes, {} slots, context {}{})\n",
               o.server.host, port, eo.kv, eo.kv_budget_bytes, eo.parallel,
               eo.ctx > 0 ? eo.ctx : m.weights.config.n_ctx_train, stores);
    std::fflush(stderr);

    std::atomic<bool> running{true};
    std::thread waiter([&] {
        while (running.load() && !g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        server.stop();
    });
    server.run();
    running.store(false);
    waiter.join();
    fmt::print(stderr, "aqpim serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    o->model.kv = "pq";
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server: many long conversations in one KV budget");
    add_model_options(cmd, o->model);
    cmd->add_option("--kv-budget", o->kv_budget, "KV bytes of all sequences together (e.g. 2GiB)")->capture_default_str();
    cmd->add_option("--parallel,--np", o->engine.parallel, "sequences decoding at once (slots)")
        ->capture_default_str()->check(CLI::Range(1, 4096));
    cmd->add_option("-c,--ctx-size", o->engine.ctx, "most tokens of one sequence (default: the model's context)")
        ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 24));
    cmd->add_option("--queue", o->engine.queue_capacity, "requests waiting for admission before 503")
        ->capture_default_str()->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--prefill-chunk", o->engine.prefill_chunk, "prompt tokens prefilled between decode steps")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--kv-store", o->engine.kv_store,
                    "KV prefix store tier, repeatable, searched in order: memory[:BYTES], disk:DIR[:BYTES], "
                    "redis://HOST[:PORT][/DB] (docs/kv-store.md); a disk tier also takes parked sequences and the "
                    "prompt cache's dropped ones");
    cmd->add_option("--kv-store-block", o->engine.kv_store_block, "tokens per stored block (a multiple of --prefill-chunk)")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--kv-store-tail-every", o->engine.kv_store_tail_every,
                    "store a block's tail (a PQ sequence's f16 window) for every N blocks, and where a chain ends")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    cmd->add_flag("--cache-prompt,!--no-cache-prompt", o->engine.cache_prompt,
                  "the prompt cache (default on): keep finished sequences in their slots and continue one whose "
                  "tokens a new prompt begins with (dropped, least recently used first, when admission needs the room)")
        ->capture_default_str();
    cmd->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", o->server.port, "port (0: any free one, printed)")->capture_default_str()
        ->check(CLI::Range(0, 65535));
    cmd->add_option("--threads-http", o->server.http_threads, "connection threads (default: parallel + queue + 8)")
        ->check(CLI::Range(1, 4096));
    cmd->add_option("-a,--alias", o->server.model_alias, "model id in /v1/models and responses (default: its name)");
    cmd->add_option("--chat-template", o->server.chat_template,
                    "plain, llama2, llama3, chatml, mistral, gemma, phi3, phi4 or deepseek (default: recognised from the model)");
    cmd->add_option("--reasoning-format", o->server.reasoning_format,
                    "auto, none or deepseek: a chat answer's <think>...</think> as message.reasoning_content "
                    "(auto: deepseek when the model's chat template writes </think>)")
        ->capture_default_str();
    cmd->add_option("--reasoning-budget", o->server.reasoning_budget,
                    "-1: reasoning as the model likes; 0: none (a chat prompt ends with an empty <think></think>, "
                    "unless the request's chat_template_kwargs.enable_thinking says otherwise)")
        ->capture_default_str()->check(CLI::IsMember({-1, 0}));
    cmd->add_option("--slot-save-path", o->server.slot_save_path, "directory for POST /slots/ID?action=save|restore");
    cmd->add_option("--api-key", o->server.api_key, "require Authorization: Bearer KEY on every endpoint but /health");
    cmd->add_option("--max-body", o->server.max_body_bytes, "largest request body in bytes (larger: 413)")
        ->capture_default_str()->check(CLI::Range(std::size_t(1024), std::size_t(1) << 30));
    cmd->add_option("--timeout", o->server.timeout_seconds, "socket read/write timeout in seconds")
        ->capture_default_str()->check(CLI::Range(1, 3600));
    cmd->add_option("-n,--n-predict", o->server.default_max_tokens, "max_tokens of a chat request that gives none")
        ->capture_default_str()->check(CLI::Range(1, 1 << 24));
    cmd->callback([o] { run_serve(*o); });
}

}  // namespace aqpim::cli
