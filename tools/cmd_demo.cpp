// `aqpim demo`: adaptive PQ on real attention inputs (layer 0 of a shared model on real text, or
// generated data), side by side across configurations: what the PQ ideas buy in fidelity and
// what every byte costs.

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/kv_capture.h"
#include "aqpim/pq_fidelity.h"
#include "aqpim/timer.h"
#include "commands.h"

namespace aqpim::cli {

namespace {

/// ../shared beside the checkout this binary was built from, else ../shared of the working directory.
std::string shared_data_dir() {
#ifdef AQPIM_SHARED_DATA_DIR
    if (std::filesystem::is_directory(AQPIM_SHARED_DATA_DIR))
        return std::filesystem::path(AQPIM_SHARED_DATA_DIR).lexically_normal().string();
#endif
    return "../shared";
}

struct DemoArgs {
    std::string model = shared_data_dir() + "/models/austen-13m";
    std::string ids = shared_data_dir() + "/reference/tokens/austen-13m.northanger-first64KB.ids";
    int n_tokens = 1024, calib = 256, queries = 32;
    bool synthetic = false, json = false;
};

std::vector<PqFidelityConfig> demo_configs(int D, RopePairs pairs) {
    auto make = [&](const char* name, int M, int nbits, RopePairs p, bool scale, Rotation rot, SubspaceOrder order) {
        PQParams k;
        k.D = D;
        k.M = M;
        k.nbits = nbits;
        k.pairs = p;
        k.scale_folding = scale;
        k.rotation = rot;
        k.order = order;
        PQParams v = k;
        v.pairs = RopePairs::none;  // values are not rotated by RoPE
        return PqFidelityConfig{name, k, v};
    };
    const auto none = RopePairs::none;
    const auto contig = SubspaceOrder::contiguous, balanced = SubspaceOrder::variance_balanced;
    return {
        make("M=32 4-bit, plain contiguous", 32, 4, none, false, Rotation::none, contig),
        make("M=32 4-bit, + RoPE pairs", 32, 4, pairs, false, Rotation::none, contig),
        make("M=32 4-bit, + pairs + scale folding", 32, 4, pairs, true, Rotation::none, contig),
        make("M=32 4-bit, + pairs + scale + balanced", 32, 4, pairs, true, Rotation::none, balanced),
        make("M=32 4-bit, Hadamard rotation", 32, 4, none, true, Rotation::hadamard, contig),
        make("M=16 4-bit, pairs + scale", 16, 4, pairs, true, Rotation::none, contig),
        make("M=64 4-bit, pairs + scale", 64, 4, pairs, true, Rotation::none, contig),
        make("M=32 8-bit, pairs + scale", 32, 8, pairs, true, Rotation::none, contig),
    };
}

void run_demo(const DemoArgs& a) {
    Timer total;
    CapturedAttention cap;
    std::string source;
    if (a.synthetic) {
        cap = synthetic_attention(a.n_tokens, 4, 2, 128, 7);
        source = fmt::format("generated data: {} tokens, 4 query heads, 2 KV heads, head_dim 128", a.n_tokens);
    } else {
        AQPIM_CHECK(std::filesystem::exists(a.model), "model '{}' does not exist (use -m MODEL, or --synthetic)",
                    a.model);
        auto ids = read_token_ids(a.ids);
        AQPIM_CHECK(int(ids.size()) >= a.n_tokens, "{} has {} tokens, fewer than the {} requested", a.ids, ids.size(),
                    a.n_tokens);
        ids.resize(a.n_tokens);
        cap = capture_layer0(a.model, ids);
        source = fmt::format("{} layer 0 on {} tokens of {}: {} query heads, {} KV heads, head_dim {}", a.model,
                             a.n_tokens, a.ids, cap.n_head, cap.n_kv_head, cap.head_dim);
    }
    AQPIM_CHECK(a.calib >= 1 && a.calib <= cap.n_tokens, "--calib {} must be in [1, {}]", a.calib, cap.n_tokens);
    AQPIM_CHECK(a.queries >= 1 && a.queries <= cap.n_tokens, "--queries {} must be in [1, {}]", a.queries, cap.n_tokens);
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& cfg : demo_configs(cap.head_dim, cap.rope_pairs)) {
        const PqFidelity f = measure_pq_fidelity(cap, cfg, a.calib, a.queries);
        rows.push_back({{"config", f.name}, {"bits_per_element", f.bits_per_element},
                        {"compression_vs_f16", f.compression_vs_f16}, {"key_rel_mse", f.key_rel_mse},
                        {"value_rel_mse", f.value_rel_mse}, {"score_rel_rmse", f.score_rel_rmse},
                        {"attn_out_rel_err", f.attn_rel_err}, {"mean_kl", f.mean_kl}, {"top1_agree", f.top1_agreement},
                        {"train_ms", f.train_ms}, {"encode_mtok_per_s", f.encode_mtokens_per_s}});
    }
    if (a.json) {
        fmt::print("{}\n", nlohmann::json{{"source", source}, {"calib", a.calib}, {"queries", a.queries}, {"rows", rows}}.dump(2));
        return;
    }
    fmt::print("aqpim demo: adaptive product quantization of a KV cache\n");
    fmt::print("source: {}\n", source);
    fmt::print("codebooks learned online from the first {} tokens (per KV head, K and V); all {} tokens encoded;\n"
               "the last {} positions attend causally on the codes vs exact f32 attention.\n"
               "bits/elem counts codes + every codebook, scale and transform.\n\n",
               a.calib, cap.n_tokens, a.queries);
    fmt::print("{:<40} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9}\n", "configuration", "bits/elem", "vs f16",
               "K relMSE", "V relMSE", "score err", "attn err", "KL", "top1", "train ms");
    for (const auto& r : rows)
        fmt::print("{:<40} {:>9.3f} {:>6.1f}x {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.5f} {:>6.3f} {:>9.1f}\n",
                   r["config"].get<std::string>(), r["bits_per_element"].get<double>(),
                   r["compression_vs_f16"].get<double>(), r["key_rel_mse"].get<double>(),
                   r["value_rel_mse"].get<double>(), r["score_rel_rmse"].get<double>(),
                   r["attn_out_rel_err"].get<double>(), r["mean_kl"].get<double>(), r["top1_agree"].get<double>(),
                   r["train_ms"].get<double>());
    fmt::print("\ndone in {:.1f} s\n", total.seconds());
}

}  // namespace

void add_demo_command(CLI::App& app) {
    auto args = std::make_shared<DemoArgs>();
    auto* cmd = app.add_subcommand("demo", "adaptive PQ of real K/V vectors: fidelity and bytes per configuration");
    auto* model = cmd->add_option("-m,--model", args->model, "model: GGUF file, Hugging Face directory or llama2.c checkpoint")
        ->capture_default_str();
    auto* ids = cmd->add_option("--ids", args->ids, "token ids (JSON array) to run through layer 0")->capture_default_str();
    cmd->add_option("-n,--tokens", args->n_tokens, "context length")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    cmd->add_option("--calib", args->calib, "calibration tokens for the codebooks")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--queries", args->queries, "last positions used as queries")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_flag("--synthetic", args->synthetic, "use generated data instead of a model")->excludes(model)->excludes(ids);
    cmd->add_flag("--json", args->json, "print JSON");
    cmd->callback([args] { run_demo(*args); });
}

}  // namespace aqpim::cli
