#pragma once
// Options every model-running subcommand shares (-m, --tokenizer, --kv) and their handling.

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "aqpim/kv_cache.h"
#include "aqpim/model.h"

namespace aqpim::cli {

struct ModelOptions {
    std::string model;
    std::string tokenizer;
    std::string kv = "f16";
};

void add_model_options(CLI::App* cmd, ModelOptions& opts);
/// Load the model named by -m (with --tokenizer) and print a one-line summary to stderr.
LoadedModel load_model_for_cli(const ModelOptions& opts);
/// The cache --kv names; `context` is the length bits/element targets are stated at.
std::unique_ptr<KvCache> make_cli_kv_cache(const ModelOptions& opts, const KvShape& shape, std::int64_t context);
/// The whole file (the -f text of ppl and eval); a clear error if it cannot be read.
std::string read_text_file(const std::string& path);
/// Warn on stderr when n_tokens exceeds the context the file states (a default, not a limit).
void warn_past_training_context(const ModelConfig& config, std::int64_t n_tokens);

}  // namespace aqpim::cli
