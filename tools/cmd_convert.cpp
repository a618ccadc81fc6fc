// `aqpim convert`: a Hugging Face safetensors directory, a llama2.c checkpoint or a GGUF file ->
// GGUF v3 that llama.cpp (and aqpim) read.

#include <fmt/format.h>


#include "aqpim/convert.h"
#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/model.h"
#include "aqpim/timer.h"
#include "commands.h"

namespace aqpim::cli {

namespace {


struct ConvertArgs {
    std::string model, tokenizer, type = "source", name, out;
};

void run_convert(const ConvertArgs& a) {
    ConvertOptions opt;
    opt.matrix_type = parse_convert_type(a.type);  // bad --type fails before any loading
    opt.name = a.name;
    check_output_not_input(a.out, {a.model, a.tokenizer}, "convert: output");
    Timer timer;
    LoadOptions lo;
    lo.tokenizer_path = a.tokenizer;
    const LoadedModel m = load_model(a.model, lo);
    const ModelConfig& c = m.weights.config;
    const ConvertSummary s = convert_to_gguf(m, a.out, opt);

    fmt::print("converted {} ({}, {}, {:.2f} M parameters) -> {}\n", a.model, m.weights.format, s.arch,
               double(c.n_params()) / 1e6, a.out);
    fmt::print("  shape:      n_embd {}, n_ff {}, n_layer {}, n_head {}, n_kv_head {}, head_dim {}, n_vocab {}, "
               "context {}\n",
               c.n_embd, c.n_ff, c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_vocab, c.n_ctx_train);
    fmt::print("  tensors:    {} ({:.2f} MiB), matrices {}, general.file_type {}{}\n", s.n_tensors,
               double(s.tensor_bytes) / (1 << 20), opt.matrix_type ? ggml_type_name(*opt.matrix_type) : "as stored",
               s.file_type, c.tied_output ? ", output tied to token_embd" : "");
    fmt::print("  Q/K rows:   {}\n",
               s.permuted_qk ? "permuted from NeoX (HF rotate_half) to GGUF's interleaved pair order"
               : c.arch == ModelArch::qwen2 ? "kept (GGUF qwen2 rotates halves too)"
                                            : "kept (already interleaved)");
    if (s.n_vocab_tokens > 0)
        fmt::print("  vocabulary: {} tokens\n", s.n_vocab_tokens);
    else
        fmt::print("  vocabulary: none (tokenizer.ggml.model = no_vocab); pass --tokenizer to add one\n");
    fmt::print("  time:       {:.2f} s\n", timer.seconds());
}

}  // namespace

void add_convert_command(CLI::App& app) {
    auto args = std::make_shared<ConvertArgs>();
    auto* cmd = app.add_subcommand(
        "convert", "write a model (safetensors directory, llama2.c .bin or GGUF) as GGUF v3 for llama.cpp and aqpim");
    cmd->add_option("-m,--model", args->model, "model: safetensors directory, llama2.c checkpoint or .gguf")
        ->required();
    cmd->add_option("--tokenizer", args->tokenizer,
                    "vocabulary file (tokenizer.bin, tokenizer.json, tokenizer.model, .gguf); llama2.c default: "
                    "tokenizer.bin or the one tok*.bin beside the checkpoint");
    cmd->add_option("--type", args->type, "matrix type: f32, f16, bf16, q8_0 or source (as stored; default)");
    cmd->add_option("--name", args->name, "general.name (default: the model's directory or file name)");
    cmd->add_option("-o,--output", args->out, "output .gguf file")->required();
    cmd->callback([args] { run_convert(*args); });
}

}  // namespace aqpim::cli
