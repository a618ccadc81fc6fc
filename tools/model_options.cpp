// Shared model options of `run`, `ppl` and `info`.

#include "model_options.h"

#include <fmt/format.h>


#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/kv_scheme.h"

namespace aqpim::cli {

void add_model_options(CLI::App* cmd, ModelOptions& opts) {
    cmd->add_option("-m,--model", opts.model,
                    "model: a .gguf file, a Hugging Face safetensors directory, or a llama2.c .bin")
        ->required();
    cmd->add_option("--tokenizer", opts.tokenizer,
                    "vocabulary file (tokenizer.bin, tokenizer.json, tokenizer.model or .gguf); "
                    "default: the model's own, or tokenizer.bin / tok*.bin beside a llama2.c checkpoint");
    std::string names;
    for (const std::string& n : kv_scheme_names()) names += (names.empty() ? "" : ", ") + n;
    cmd->add_option("--kv", opts.kv,
                    "KV cache scheme NAME[:key=value,...], NAME one of " + names +
                        " (docs/kv-scalar.md, docs/kv-pq.md, docs/kv-baselines.md)");
}

LoadedModel load_model_for_cli(const ModelOptions& opts) {
    LoadOptions lo;
    lo.tokenizer_path = opts.tokenizer;
    LoadedModel m = load_model(opts.model, lo);
    const ModelConfig& c = m.weights.config;
    fmt::print(stderr, "model: {} ({}, {}): {} layers, {} embd, {} heads / {} kv heads of {}, {:.2f} M params, {:.1f} MB\n",
               c.name, m.weights.format, model_arch_name(c.arch), c.n_layer, c.n_embd, c.n_head, c.n_kv_head,
               c.head_dim, c.n_params() / 1e6, m.weights.weight_bytes() / 1e6);
    return m;
}

std::unique_ptr<KvCache> make_cli_kv_cache(const ModelOptions& opts, const KvShape& shape, std::int64_t context) {
    KvCacheOptions o;
    o.context = context;
    return make_kv_cache(parse_kv_scheme(opts.kv), shape, o);
}

std::string read_text_file(const std::string& path) { return read_whole_file(path, "-f"); }

void warn_past_training_context(const ModelConfig& config, std::int64_t n_tokens) {
    if (n_tokens > config.n_ctx_train)
        fmt::print(stderr, "warning: {} tokens exceed the context length the model file states ({}); continuing\n",
                   n_tokens, config.n_ctx_train);
}

}  // namespace aqpim::cli
