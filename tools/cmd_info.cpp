// `aqpim info`: what this build and CPU can do; with -m, what a model is and what its KV cache costs.

#include <fmt/format.h>

#include <map>

#include "aqpim/model.h"
#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "commands.h"

namespace aqpim::cli {
namespace {

void print_model(const std::string& path, const std::string& tokenizer) {
    LoadOptions lo;
    lo.tokenizer_path = tokenizer;
    const LoadedModel m = load_model(path, lo);
    const ModelConfig& c = m.weights.config;
    fmt::print("model:        {}\nformat:       {}\narchitecture: {}\n", c.name, m.weights.format, model_arch_name(c.arch));
    fmt::print("shape:        {} layers, n_embd {}, n_ff {}, {} heads, {} KV heads (GQA {}:1), head_dim {}, vocab {}\n",
               c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_kv_head, c.n_head / c.n_kv_head, c.head_dim, c.n_vocab);
    fmt::print("rope:         {} pairs, theta {}{}\n", c.rope_pairs == RopePairs::neox ? "NeoX (i, i+d/2)" : "interleaved (2i, 2i+1)",
               c.rope_theta, m.weights.rope_freq_factors.empty() ? "" : ", per-frequency factors");
    fmt::print("context:      {} (stated by the file; a default, not a limit)\n", c.n_ctx_train);
    fmt::print("output:       {}{}\n", c.tied_output ? "tied to the token embedding" : "separate matrix",
               c.qkv_bias ? ", QKV bias" : "");
    fmt::print("parameters:   {} ({:.2f} M)\nweights:      {} bytes ({:.2f} MB), types:", c.n_params(), c.n_params() / 1e6,
               m.weights.weight_bytes(), m.weights.weight_bytes() / 1e6);
    std::map<std::string, int> types;
    for (const LayerWeights& l : m.weights.layers)
        for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) ++types[ggml_type_name(w->type)];
    ++types[ggml_type_name(m.weights.token_embd.type)];
    for (const auto& [name, count] : types) fmt::print(" {} x{}", name, count);
    fmt::print("\ntokenizer:    {}\n", m.tokenizer ? fmt::format("{} tokens, {}", m.tokenizer->n_vocab(),
                                                                    m.tokenizer->vocab().kind == VocabKind::spm ? "SentencePiece-style" : "byte-level BPE")
                                                   : std::string("none"));

    const std::int64_t elems = 2LL * c.n_layer * c.n_kv_head * c.head_dim;
    fmt::print("\nKV cache per token (all layers, K and V; at context {}):\n", c.n_ctx_train);
    fmt::print("  {:<8} {:>14} {:>18}\n", "scheme", "bytes/token", "bytes at context");
    for (const auto& [name, bytes_per_elem] : {std::pair{"f32", 4}, std::pair{"f16", 2}})
        fmt::print("  {:<8} {:>14} {:>18}\n", name, elems * bytes_per_elem, elems * bytes_per_elem * c.n_ctx_train);
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("info", "show the CPU's SIMD levels and the active kernel level; with -m, a model");
    auto model = std::make_shared<std::string>();
    auto tokenizer = std::make_shared<std::string>();
    cmd->add_option("-m,--model", *model, "describe a model (.gguf, safetensors directory, llama2.c .bin)");
    cmd->add_option("--tokenizer", *tokenizer, "vocabulary file for a llama2.c checkpoint");
    cmd->callback([=] {
        fmt::print("simd levels supported:");
        for (SimdLevel l : supported_simd_levels()) fmt::print(" {}", simd_level_name(l));
        fmt::print("\nsimd level active:    {}\nthreads:              {}\n", simd_level_name(active_simd_level()),
                   default_threads());
        if (!model->empty()) {
            fmt::print("\n");
            print_model(*model, *tokenizer);
        }
    });
}

}  // namespace aqpim::cli
