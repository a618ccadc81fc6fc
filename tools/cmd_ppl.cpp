// `aqpim ppl`: perplexity of a text with llama.cpp's protocol.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "aqpim/error.h"
#include "aqpim/perplexity.h"
#include "commands.h"
#include "model_options.h"
#include "text_part.h"

namespace aqpim::cli {
namespace {

void print_progress(int done, int total) {
    const int width = 40, filled = width * done / total;
    fmt::print(stderr, "\r[{}{}] {}/{} chunks", std::string(filled, '#'), std::string(width - filled, '.'), done, total);
    if (done == total) fmt::print(stderr, "\n");
}

}  // namespace

void add_ppl_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("ppl", "perplexity of a text file (llama.cpp's llama-perplexity protocol)");
    auto opts = std::make_shared<ModelOptions>();
    auto text_path = std::make_shared<std::string>();
    auto popt = std::make_shared<PerplexityOptions>();
    auto json = std::make_shared<bool>(false);
    auto part = std::make_shared<TextPart>();
    add_model_options(cmd, *opts);
    cmd->add_option("-f,--file", *text_path, "text file")->required();
    cmd->add_option("-c,--ctx", popt->n_ctx, "tokens per chunk")->check(CLI::Range(4, 1 << 20));
    cmd->add_option("--chunks", popt->max_chunks, "evaluate at most this many chunks (0 = all)")
        ->check(CLI::Range(0, 1 << 30));
    add_text_part_option(cmd, *part);
    cmd->add_flag("--json", *json, "print the result as JSON on stdout");
    cmd->callback([=] {
        const LoadedModel model = load_model_for_cli(*opts);
        AQPIM_CHECK(model.tokenizer, "model {} has no vocabulary; pass --tokenizer", opts->model);
        AQPIM_CHECK(model.tokenizer->bos() >= 0, "the vocabulary has no BOS token; the protocol needs one");
        warn_past_training_context(model.weights.config, popt->n_ctx);
        Transformer transformer(model.weights);
        const std::vector<std::int32_t> tokens = model.tokenizer->encode(text_part(read_text_file(*text_path), *part), true);
        fmt::print(stderr, "{} (part {}/{}): {} tokens, chunks of {}\n", *text_path, part->k, part->n, tokens.size(),
                   popt->n_ctx);
        PerplexityOptions o = *popt;
        o.progress = print_progress;
        const ModelOptions mo = *opts;
        const PerplexityResult r = perplexity(
            transformer, tokens, model.tokenizer->bos(),
            [&](const KvShape& shape) { return make_cli_kv_cache(mo, shape, o.n_ctx); }, o);
        if (*json) {
            nlohmann::ordered_json j;
            j["model"] = opts->model;
            j["file"] = *text_path;
            j["kv"] = opts->kv;
            j["part"] = fmt::format("{}/{}", part->k, part->n);
            j["n_ctx"] = r.n_ctx;
            j["n_chunks"] = r.n_chunks;
            j["n_text_tokens"] = r.n_text_tokens;
            j["n_scored"] = r.n_scored;
            j["ppl"] = r.ppl;
            j["ppl_error"] = r.ppl_error;
            j["mean_nll"] = r.mean_nll;
            j["seconds"] = r.seconds;
            fmt::print("{}\n", j.dump(1));
        } else {
            fmt::print("PPL = {:.4f} +/- {:.5f}  ({} chunks of {}, {} tokens scored, kv {}, {:.1f} s)\n", r.ppl,
                       r.ppl_error, r.n_chunks, r.n_ctx, r.n_scored, opts->kv, r.seconds);
        }
    });
}

}  // namespace aqpim::cli
