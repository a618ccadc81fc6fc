// `aqpim eval`: the quality harness (docs/eval.md). Three modes over the schemes of --kv:
//   (default)     perplexity chunks: PPL, delta vs f16, KL, top-1, bits/element, KV bytes, tokens/s
//   --generate N  greedy decoding after a prompt: first divergence from f16, KL per window of steps
//   --fidelity    one layer's KV head: attention-output and score error by position, and the
//                 retrieval view (--all-heads: the retrieval view over every layer and KV head)
//   --needles     planted needles on synthetic K/V of the model's head_dim, 1K-128K tokens (with -f:
//                 a column of the perplexity table, at -c)
//   --retrieval F end-to-end retrieval: greedy exact match of each JSONL prompt's expected text
//   --retrieval-gen OUT  write copy prompts (JSONL) with filler from -f

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/model.h"
#include "aqpim/eval.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/retrieval.h"
#include "commands.h"
#include "model_options.h"
#include "text_part.h"

namespace aqpim::cli {
namespace {

namespace fs = std::filesystem;

struct EvalArgs {
    std::string text_path;
    QualityOptions quality;
    bool json = false, csv = false;
    std::string plot;
    int generate = 0;
    std::string prompt;
    int window = 32;
    bool fidelity = false;
    FidelityOptions fid;
    bool no_probe = false;
    TextPart part;
    bool all_heads = false;
    bool needles = false;
    NeedleOptions needle;
    std::string retrieval, retrieval_gen;
    RetrievalGenOptions gen;
};

/// The retrieval view summed over every layer and KV head (each one measure_fidelity run).
std::string all_heads_retrieval(Transformer& transformer, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                                const std::vector<KvSchemeSpec>& schemes, FidelityOptions fo) {
    std::vector<std::string> names;
    std::vector<std::optional<RetrievalCounter>> merged(schemes.size());
    for (const KvSchemeSpec& s : schemes) names.push_back(s.text);
    const KvShape shape = transformer.kv_shape();
    for (int il = 0; il < shape.n_layer; ++il)
        for (int ih = 0; ih < shape.n_kv_head; ++ih) {
            fo.layer = il;
            fo.head = ih;
            fmt::print(stderr, "retrieval view: layer {} KV head {}\n", il, ih);
            const FidelityReport r = measure_fidelity(transformer, tokens, bos, schemes, fo);
            for (std::size_t s = 0; s < schemes.size(); ++s) {
                const auto& c = r.schemes[s].retrieval;
                if (!c) {
                    fmt::print(stderr, "{}: weights not read at layer {} head {}: {}\n", schemes[s].text, il, ih,
                               r.schemes[s].probe_note);
                    continue;
                }
                if (merged[s]) merged[s]->merge(*c); else merged[s] = c;
            }
        }
    std::vector<const RetrievalCounter*> counters;
    for (const auto& m : merged) counters.push_back(m ? &*m : nullptr);
    return fmt::format("every layer ({}) and KV head ({}), {} tokens\n", shape.n_layer, shape.n_kv_head, fo.n_ctx) +
           retrieval_view_table(names, counters);
}

/// 'text' for /bin/sh.
std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
}

/// scripts/plot_eval.py: $AQPIM_PLOT_SCRIPT, else beside the build (bin/../../scripts) or the
/// install (bin/../share/aqpim), else ./scripts.
std::string find_plot_script() {
    if (const char* env = std::getenv("AQPIM_PLOT_SCRIPT"); env && *env) {
        AQPIM_CHECK(fs::exists(env), "AQPIM_PLOT_SCRIPT={}: no such file", env);
        return env;
    }
    std::vector<fs::path> candidates;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        candidates.push_back(exe.parent_path() / "../../scripts/plot_eval.py");
        candidates.push_back(exe.parent_path() / "../share/aqpim/plot_eval.py");
    }
    candidates.push_back("scripts/plot_eval.py");
    for (const fs::path& p : candidates)
        if (fs::exists(p)) return fs::weakly_canonical(p).string();
    AQPIM_FAIL("--plot: cannot find scripts/plot_eval.py (set AQPIM_PLOT_SCRIPT to its path)");
}

struct Plotter {
    std::string python;  ///< an interpreter that imports matplotlib
    std::string script;
};

/// Fail early (before a long evaluation) when the plot cannot be made. The interpreter: $AQPIM_PYTHON,
/// else the first of `python3` on PATH and /usr/bin/python3 (Debian's python3-matplotlib) that
/// imports matplotlib.
Plotter check_plot(const std::string& file) {
    std::string ext = fs::path(file).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    AQPIM_CHECK(ext == ".png" || ext == ".svg", "--plot {}: the file name must end in .png or .svg", file);
    Plotter p;
    p.script = find_plot_script();
    std::vector<std::string> pythons = {"python3", "/usr/bin/python3"};
    if (const char* env = std::getenv("AQPIM_PYTHON"); env && *env) pythons = {env};
    for (const std::string& py : pythons)
        if (std::system((shell_quote(py) + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) {
            p.python = py;
            return p;
        }
    AQPIM_FAIL("--plot needs python3 with matplotlib, which is not installed (Debian: apt-get install "
               "python3-matplotlib; or set AQPIM_PYTHON to an interpreter that has it)");
}

void run_plot(const Plotter& plotter, const std::string& json, const std::string& file) {
    const fs::path tmp = fs::temp_directory_path() / fmt::format("aqpim-eval-{}.json", ::getpid());
    std::ofstream(tmp) << json;
    const std::string cmd = shell_quote(plotter.python) + " " + shell_quote(plotter.script) + " " +
                            shell_quote(tmp.string()) + " " + shell_quote(file);
    const int rc = std::system(cmd.c_str());
    fs::remove(tmp);
    AQPIM_CHECK(rc == 0, "--plot {}: {} failed (exit status {})", file, plotter.script, rc);
    fmt::print(stderr, "plot written to {}\n", file);
}

void print_progress(int done, int total) {
    const int width = 40, filled = width * done / total;
    fmt::print(stderr, "\r[{}{}] {}/{} chunks", std::string(filled, '#'), std::string(width - filled, '.'), done, total);
    if (done == total) fmt::print(stderr, "\n");
}

void print_report(const EvalArgs& a, const std::string& table, const std::string& json, const std::string& csv) {
    const std::string& out = a.json ? json : a.csv ? csv : table;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
}

}  // namespace

void add_eval_command(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "eval", "quality of KV cache schemes against f16: perplexity, KL, top-1, bits/element (docs/eval.md)");
    auto opts = std::make_shared<ModelOptions>();
    auto a = std::make_shared<EvalArgs>();
    add_model_options(cmd, *opts);
    cmd->get_option("--kv")->description(
        "KV cache schemes separated by ';', each NAME[:key=value,...]; f16 (the reference) is added when missing");
    auto* file = cmd->add_option("-f,--file", a->text_path, "text file (perplexity and fidelity modes)");
    cmd->add_option("-c,--ctx", a->quality.n_ctx, "tokens per chunk (default 512)")->check(CLI::Range(4, 1 << 20));
    auto* part = add_text_part_option(cmd, a->part);
    auto* chunks = cmd->add_option("--chunks", a->quality.max_chunks, "evaluate at most this many chunks (0 = all)")
        ->check(CLI::Range(0, 1 << 30));
    auto* json = cmd->add_flag("--json", a->json, "print the report as JSON");
    auto* csv = cmd->add_flag("--csv", a->csv, "print the report as CSV");
    json->excludes(csv);
    cmd->add_option("--plot", a->plot, "perplexity mode: plot quality vs bits/element into FILE.png or FILE.svg "
                                       "(scripts/plot_eval.py, needs python3-matplotlib)");
    auto* generate = cmd->add_option("--generate", a->generate, "long generation check: greedy-decode N tokens with every scheme")
                         ->check(CLI::Range(1, 1 << 24))
                         ->excludes(file)
                         ->excludes(chunks)
                         ->excludes(part);
    cmd->add_option("-p,--prompt", a->prompt, "prompt of --generate (BOS is added; empty: BOS alone)")->needs(generate);
    cmd->add_option("--window", a->window, "--generate: steps per KL window (default 32)")
        ->check(CLI::Range(1, 1 << 24))
        ->needs(generate);
    auto* fidelity = cmd->add_flag("--fidelity", a->fidelity, "attention fidelity of one layer's KV head (--layer, --head)");
    // The options of one mode given in another would be ignored: they are refused instead.
    cmd->add_option("--layer", a->fid.layer, "--fidelity: layer (default 0)")
        ->check(CLI::Range(0, ModelLimits::layers - 1))
        ->needs(fidelity);
    cmd->add_option("--head", a->fid.head, "--fidelity: KV head (default 0)")
        ->check(CLI::Range(0, ModelLimits::heads - 1))
        ->needs(fidelity);
    cmd->add_option("--bins", a->fid.n_bins, "--fidelity: position bins (default 8)")->check(CLI::Range(1, 1 << 20))->needs(fidelity);
    cmd->add_flag("--no-probe", a->no_probe, "--fidelity: skip the probe runs that read attention weights")->needs(fidelity);
    cmd->add_option("--probe-block", a->fid.probe_block,
                    "--fidelity: tokens per probe block, <= head_dim (default min(head_dim, 16); docs/eval.md)")
        ->check(CLI::Range(1, 1 << 20))
        ->needs(fidelity);

    cmd->add_flag("--all-heads", a->all_heads, "--fidelity: the retrieval view over every layer and KV head")->needs(fidelity);
    auto* needles = cmd->add_flag("--needles", a->needles,
                                  "planted needles on synthetic K/V of the model's head_dim (--contexts, --depths); "
                                  "with -f TEXT, a column of the perplexity table at the chunk's context");
    auto* retrieval = cmd->add_option("--retrieval", a->retrieval,
                                      "end-to-end retrieval: FILE.jsonl of {\"prompt\", \"expected\"} lines, greedy exact match");
    auto* retrieval_gen = cmd->add_option("--retrieval-gen", a->retrieval_gen,
                                          "write copy prompts to OUT.jsonl (filler words from -f; --contexts, --depths)");
    auto* contexts = cmd->add_option("--contexts", a->gen.contexts, "--retrieval-gen / --needles: contexts in tokens (comma-separated)")
        ->delimiter(',')
        ->check(CLI::Range(std::int64_t(8), std::int64_t(1) << 20));
    auto* depths = cmd->add_option("--depths", a->gen.depths, "--retrieval-gen / --needles: depths of the fact, 0..1 (comma-separated)")
        ->delimiter(',')
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--per-cell", a->gen.per_cell, "--retrieval-gen: prompts per (context, depth) (default 4)")
        ->check(CLI::Range(1, 1 << 20))
        ->needs(retrieval_gen);
    cmd->add_option("--span-words", a->gen.span_words, "--retrieval-gen: words of each fact (default 8)")
        ->check(CLI::Range(2, 50))
        ->needs(retrieval_gen);
    cmd->add_option("--seed", a->gen.seed, "--retrieval-gen / --needles: seed (default 1)");
    for (auto* mode : {needles, retrieval, retrieval_gen}) {
        mode->excludes(fidelity)->excludes(generate);
        for (auto* other : {needles, retrieval, retrieval_gen})
            if (other != mode) mode->excludes(other);
    }

    cmd->callback([=] {
        const std::vector<KvSchemeSpec> schemes = parse_kv_schemes(opts->kv);
        const bool retrieval_mode = (a->needles && a->text_path.empty()) || !a->retrieval.empty() || !a->retrieval_gen.empty();
        AQPIM_CHECK(a->plot.empty() || !retrieval_mode, "--plot is for the perplexity mode");
        if (!a->retrieval_gen.empty()) {
            AQPIM_CHECK(!a->text_path.empty(), "--retrieval-gen needs -f TEXT (the filler words)");
            check_output_not_input(a->retrieval_gen, {opts->model, opts->tokenizer, a->text_path}, "--retrieval-gen");
        }
        // --needles alone: its own report over --contexts; with -f TEXT: a column of the perplexity
        // table, at the chunk's context.
        const auto needle_options = [&](const LoadedModel& model) {
            NeedleOptions no = a->needle;
            no.head_dim = model.weights.config.head_dim;
            no.seed = a->gen.seed;
            if (contexts->count() > 0) no.contexts = a->gen.contexts;
            if (depths->count() > 0) no.depths = a->gen.depths;
            return no;
        };
        const auto needle_progress = [](const std::string& m) { fmt::print(stderr, "{}\n", m); };
        if (a->needles && a->text_path.empty()) {
            const LoadedModel model = load_model_for_cli(*opts);
            const auto r = plant_needles(with_f16_reference(schemes, nullptr), needle_options(model), needle_progress);
            print_report(*a, needles_table(r), needles_json(r), needles_table(r));
            return;
        }
        AQPIM_CHECK(!a->needles || contexts->count() == 0,
                    "--needles with -f measures at the chunk's context (-c); --contexts is for --needles alone");
        AQPIM_CHECK(!(a->generate > 0 && a->fidelity), "--generate and --fidelity are separate modes; pick one");
        AQPIM_CHECK(a->plot.empty() || (a->generate == 0 && !a->fidelity),
                    "--plot is for the perplexity mode (not --generate or --fidelity)");
        AQPIM_CHECK(a->generate > 0 || !a->text_path.empty() || !a->retrieval.empty(),
                    "eval needs -f TEXT (or --generate N, --retrieval FILE)");
        if (!a->plot.empty()) check_output_not_input(a->plot, {opts->model, opts->tokenizer, a->text_path}, "--plot");
        const Plotter plotter = a->plot.empty() ? Plotter{} : check_plot(a->plot);

        const LoadedModel model = load_model_for_cli(*opts);
        AQPIM_CHECK(model.tokenizer, "model {} has no vocabulary; pass --tokenizer", opts->model);
        AQPIM_CHECK(model.tokenizer->bos() >= 0, "the vocabulary has no BOS token; the protocol needs one");
        Transformer transformer(model.weights);
        // Every scheme built once for this model before any work (a bad parameter fails now).
        check_kv_schemes(schemes, transformer.kv_shape(), KvCacheOptions{0, a->quality.n_ctx});
        const std::vector<std::pair<std::string, std::string>> meta = {
            {"model", opts->model}, {"model_name", model.weights.config.name}, {"file", a->text_path}, {"kv", opts->kv},
            {"part", fmt::format("{}/{}", a->part.k, a->part.n)}};

        if (!a->retrieval_gen.empty()) {
            const Tokenizer& tok = *model.tokenizer;
            const auto prompts = generate_retrieval_prompts(
                read_text_file(a->text_path), [&](const std::string& t) { return std::int64_t(tok.encode(t, false).size()); },
                a->gen);
            std::string out;
            for (const RetrievalPrompt& p : prompts) out += retrieval_prompt_json(p) + "\n";
            write_output_file(a->retrieval_gen, out, "--retrieval-gen");
            fmt::print(stderr, "{} prompts written to {}\n", prompts.size(), a->retrieval_gen);
            return;
        }
        if (!a->retrieval.empty()) {
            const auto prompts = parse_retrieval_jsonl(read_whole_file(a->retrieval, "--retrieval"), a->retrieval);
            const Tokenizer& tok = *model.tokenizer;
            const RetrievalTokenizer rt{[&](const std::string& t, bool bos) { return tok.encode(t, bos); },
                                        [&](const std::vector<std::int32_t>& ids) { return tok.decode(ids); }};
            const RetrievalReport r = evaluate_retrieval(transformer, rt, prompts, schemes);
            auto rmeta = meta;
            rmeta[2] = {"file", a->retrieval};
            print_report(*a, retrieval_table(r), retrieval_json(r, rmeta), retrieval_table(r));
            return;
        }
        if (a->generate > 0) {
            const std::vector<std::int32_t> prompt = model.tokenizer->encode(a->prompt, true);
            warn_past_training_context(model.weights.config, std::int64_t(prompt.size()) + a->generate);
            GenerationCheckOptions go;
            go.n_generate = a->generate;
            go.window = a->window;
            const GenerationReport r = check_generation(transformer, prompt, schemes, go);
            for (const SchemeGeneration& g : r.schemes)
                if (g.reference) fmt::print(stderr, "f16 greedy text: {}{}\n", a->prompt, model.tokenizer->decode(g.tokens));
            auto gmeta = meta;
            gmeta[2] = {"prompt", a->prompt};
            print_report(*a, generation_table(r), generation_json(r, gmeta), generation_csv(r));
            return;
        }

        const std::vector<std::int32_t> tokens = model.tokenizer->encode(text_part(read_text_file(a->text_path), a->part), true);
        warn_past_training_context(model.weights.config, a->quality.n_ctx);
        if (a->fidelity) {
            FidelityOptions fo = a->fid;
            fo.n_ctx = a->quality.n_ctx;
            fo.probe = !a->no_probe;
            if (a->all_heads) {
                AQPIM_CHECK(!a->json && !a->csv, "--all-heads prints a table only");
                const std::string t = all_heads_retrieval(transformer, tokens, model.tokenizer->bos(), schemes, fo);
                std::fwrite(t.data(), 1, t.size(), stdout);
                return;
            }
            fmt::print(stderr, "{}: {} tokens; fidelity of layer {} KV head {} over the first {}\n", a->text_path,
                       tokens.size(), fo.layer, fo.head, fo.n_ctx);
            const FidelityReport r = measure_fidelity(transformer, tokens, model.tokenizer->bos(), schemes, fo);
            print_report(*a, fidelity_table(r), fidelity_json(r, meta), fidelity_csv(r));
            return;
        }

        fmt::print(stderr, "{} (part {}/{}): {} tokens, chunks of {}\n", a->text_path, a->part.k, a->part.n, tokens.size(),
                   a->quality.n_ctx);
        QualityOptions qo = a->quality;
        qo.progress = print_progress;
        QualityReport r = evaluate_quality(transformer, tokens, model.tokenizer->bos(), schemes, qo);
        if (a->needles) {
            NeedleOptions no = needle_options(model);
            no.contexts = {a->quality.n_ctx};
            for (const SchemeNeedles& sn : plant_needles(with_f16_reference(schemes, nullptr), no, needle_progress))
                for (SchemeQuality& q : r.schemes)
                    if (q.spec == sn.spec) {
                        q.needles_n = int(sn.results.size());
                        q.needles_kept = int(std::count_if(sn.results.begin(), sn.results.end(),
                                                           [](const NeedleResult& x) { return x.kept; }));
                    }
        }
        const std::string js = quality_json(r, meta);
        print_report(*a, quality_table(r), js, quality_csv(r));
        if (!a->plot.empty()) run_plot(plotter, js, a->plot);
    });
}

}  // namespace aqpim::cli
