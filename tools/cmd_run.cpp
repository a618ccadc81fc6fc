// `aqpim run`: generate text from a model, stream it to stdout, report speed on stderr.

#include <fmt/format.h>

#include <cstdio>

#include "aqpim/error.h"
#include "aqpim/generate.h"
#include "aqpim/kv_trace.h"
#include "aqpim/threads.h"
#include "cli_checks.h"
#include "commands.h"
#include "model_options.h"
#include "run_state.h"

namespace aqpim::cli {

void add_run_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("run", "generate text: prompt in, tokens streamed to stdout, speed to stderr");
    auto opts = std::make_shared<ModelOptions>();
    auto prompt = std::make_shared<std::string>();
    auto gen = std::make_shared<GenerateOptions>();
    add_model_options(cmd, *opts);
    cmd->add_option("-p,--prompt", *prompt, "prompt text (BOS is added; empty: generate from BOS)");
    cmd->add_option("-n,--n-predict", gen->n_predict, "tokens to generate")->check(CLI::Range(0, 1 << 24));
    cmd->add_option("--temp", gen->sampler.temperature, "temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
    cmd->add_option("--top-p", gen->sampler.top_p, "nucleus sampling threshold")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--seed", gen->sampler.seed, "sampling seed")->check(non_negative_integer());
    auto trace_path = std::make_shared<std::string>();
    cmd->add_option("--trace", *trace_path, "write a KV trace of the decode for `aqpim pimsim --kv-trace` (docs/pimsim.md)");
    cmd->add_flag("--ignore-eos", [gen](std::int64_t) { gen->stop_at_eos = false; }, "keep generating after EOS");
    auto state = std::make_shared<RunStateOptions>();
    add_run_state_options(cmd, *state);
    cmd->callback([=] {
        gen->sampler.validate();
        if (!trace_path->empty()) check_output_not_input(*trace_path, {opts->model, opts->tokenizer}, "--trace");
        check_run_state_files(*state, *opts);
        const LoadedModel model = load_model_for_cli(*opts);
        AQPIM_CHECK(model.tokenizer, "model {} has no vocabulary; pass --tokenizer", opts->model);
        Transformer transformer(model.weights);
        // A restored state continues its tokens: the prompt is appended text (no BOS).
        const std::vector<std::int32_t> ids = model.tokenizer->encode(*prompt, state->restore.empty());
        RunSequence seq = start_run_sequence(*state, *cmd, *opts, model, transformer, ids, *gen);
        std::unique_ptr<KvCache>& cache = seq.cache;
        warn_past_training_context(model.weights.config, std::int64_t(seq.slot.tokens.size()) + gen->n_predict);
        std::fputs(prompt->c_str(), stdout);
        std::shared_ptr<KvTraceWriter> trace;
        if (!trace_path->empty())
            trace = std::make_shared<KvTraceWriter>(*trace_path, *cache, model.weights.config.name,
                                                    model.weights.config.n_head);
        auto step = std::make_shared<std::int64_t>(0);
        gen->on_piece = [trace, step](const std::string& piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            // The cache as decode step `step` finds it (before the step appends its token).
            if (trace) trace->record((*step)++, {0});
        };
        const GenerateResult r = generate(transformer, *model.tokenizer, *cache, 0, seq.slot, *seq.sampler, *gen);
        if (trace) trace->finish();
        finish_run_sequence(*state, seq);
        std::fputs("\n", stdout);
        std::fflush(stdout);

        const double decode_tps = r.decode_seconds > 0 ? r.n_decode_steps / r.decode_seconds : 0.0;
        const double gbps = r.decode_seconds > 0 ? r.decode_bytes / r.decode_seconds / 1e9 : 0.0;
        fmt::print(stderr,
                   "\n{}: {} threads, kv {}\nprefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n"
                   "decode:  {} tokens in {:.3f} s ({:.1f} tokens/s, {:.2f} GB/s of weights + KV read)\n",
                   model.weights.config.name, default_threads(), cache->scheme(), r.n_prompt, r.prefill_seconds,
                   r.prefill_seconds > 0 ? r.n_prompt / r.prefill_seconds : 0.0, r.n_decode_steps, r.decode_seconds,
                   decode_tps, gbps);
    });
}

}  // namespace aqpim::cli
