// `aqpim info`: what this build and CPU can do; with -m, what a model is and what its KV cache costs.

#include <fmt/format.h>

#include <map>

#include "aqpim/byte_size.h"
#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/model.h"
#include "aqpim/transformer.h"
#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "aqpim/kv_pq.h"
#include "commands.h"

namespace aqpim::cli {
namespace {

const char* kDefaultSchemes = "f32;f16;int8;int4;q8_0;q4_0;kivi2;pq;pq:bits=2;pq:bits=1;turbo:bits=2.5;turbo:bits=3.5;qjl";

struct ModelSummary {
    KvShape kv_shape;
    std::int64_t n_ctx_train = 0;
};

ModelSummary print_model(const std::string& path, const std::string& tokenizer) {
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
    return {kv_shape_of(m.weights), c.n_ctx_train};
}

/// Per scheme: bytes one sequence of `context` tokens holds, bits/element, and how many fit. A scheme
/// that does not apply to this model is "n/a"; when the user named it, the command then fails.
void print_capacity(const KvShape& shape, const std::string& schemes, bool named_by_user, std::int64_t context,
                    std::uint64_t budget) {
    fmt::print("\nKV cache of one sequence at context {} (all layers, K and V, every overhead counted){}:\n", context,
               budget ? fmt::format("; sequences that fit in {} bytes ({:.2f} GiB)", budget, budget / 1073741824.0) : "");
    fmt::print("  {:<28} {:>14} {:>16} {:>10}{}\n", "scheme", "bytes/token", "bytes", "bits/elem", budget ? "  sequences" : "");
    int unusable = 0;
    for (const KvSchemeSpec& spec : parse_kv_schemes(schemes)) {
        try {
            KvCacheOptions o;
            o.context = context;
            const std::unique_ptr<KvCache> cache = make_kv_cache(spec, shape, o);
            const std::uint64_t b = cache->sequence_bytes(context);
            const double bits = double(b) * 8.0 / (double(context) * double(shape.elements_per_token()));
            fmt::print("  {:<28} {:>14.1f} {:>16} {:>10.3f}", spec.text, double(b) / context, b, bits);
            if (budget) fmt::print("  {:>9}", budget / b);
            fmt::print("\n");
            // What a budget solved (pq:bits=B chooses every key it leaves open: docs/kv-pq.md).
            if (cache->scheme() != spec.text && spec.has("bits")) fmt::print("    = {}\n", cache->scheme());
        } catch (const Error& e) {
            fmt::print("  {:<28} n/a: {}\n", spec.text, e.what());
            ++unusable;
        }
    }
    AQPIM_CHECK(!named_by_user || unusable == 0, "--kv: {} of the schemes named cannot size this model (n/a above)",
                unusable);
}

}  // namespace



void add_info_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("info", "show the CPU's SIMD levels and the active kernel level; with -m, a model");
    auto model = std::make_shared<std::string>();
    auto tokenizer = std::make_shared<std::string>();
    auto schemes = std::make_shared<std::string>(kDefaultSchemes);
    auto context = std::make_shared<std::int64_t>(0);
    auto budget = std::make_shared<std::string>();
    cmd->add_option("-m,--model", *model, "describe a model (.gguf, safetensors directory, llama2.c .bin)");
    cmd->add_option("--tokenizer", *tokenizer, "vocabulary file for a llama2.c checkpoint");
    CLI::Option* kv = cmd->add_option("--kv", *schemes, "KV schemes to size, ';'-separated")->capture_default_str();
    CLI::Option* context_opt = cmd->add_option("--context", *context, "context length the KV sizes are stated at (default: the model's)")
        ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 32));
    cmd->add_option("--budget", *budget, "memory for KV caches (e.g. 80GiB): how many sequences fit, per scheme");
    auto pq_keys = std::make_shared<bool>(false);
    CLI::Option* keys_opt = cmd->add_flag("--pq-keys", *pq_keys, "print the keys of --kv pq:... as a markdown table and exit");
    keys_opt->excludes(kv)->excludes(context_opt);
    cmd->callback([=] {
        if (*pq_keys) {
            AQPIM_CHECK(model->empty() && budget->empty(), "--pq-keys prints the pq keys alone: drop -m and --budget");
            fmt::print("{}", PqKvParams::key_listing());
            return;
        }
        AQPIM_CHECK(!model->empty() || (kv->count() == 0 && context_opt->count() == 0 && budget->empty()),
                    "--kv, --context and --budget size a model's KV cache: give -m MODEL");
        fmt::print("simd levels supported:");
        for (SimdLevel l : supported_simd_levels()) fmt::print(" {}", simd_level_name(l));
        fmt::print("\nsimd level active:    {}\nthreads:              {}\n", simd_level_name(active_simd_level()),
                   default_threads());
        if (!model->empty()) {
            fmt::print("\n");
            const ModelSummary m = print_model(*model, *tokenizer);
            print_capacity(m.kv_shape, *schemes, kv->count() > 0, *context > 0 ? *context : m.n_ctx_train,
                           budget->empty() ? 0 : parse_byte_size(*budget, "--budget"));
        }
    });
}

}  // namespace aqpim::cli
