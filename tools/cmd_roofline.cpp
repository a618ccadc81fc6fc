// `aqpim roofline`: the memory-wall model of LLM inference for a model on a device (docs/roofline.md).

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/preset.h"
#include "cli_checks.h"
#include "commands.h"
#include "roofline_reports.h"

namespace aqpim::cli {
namespace {
namespace fs = std::filesystem;

struct RooflineArgs {
    std::string model_file, preset, device = "h100-sxm";
    std::string table = "summary";
    std::string batches = "1,2,4,8,16,32,64,128,256";
    std::string contexts = "128,512,1024,2048,4096,8192,16384,32768,65536,131072";
    std::string kv_list = "f16;int8;q8_0;q4_0;int4;kivi2;pq";
    std::string energy = "article-7nm;horowitz-45nm;hbm2-45nm-logic";
    std::string validation = "decode-batch1";
    std::string plot;
    bool json = false, csv = false, list = false;
    PerfRun run;
};

template <typename T>
std::vector<T> parse_list(const std::string& option, const std::string& text, T lo, T hi) {
    std::vector<T> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        std::size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        AQPIM_CHECK(used == item.size() && v >= lo && v <= hi, "{} {}: \"{}\" is not a whole number in [{}, {}]", option, text, item, lo, hi);
        out.push_back(T(v));
    }
    AQPIM_CHECK(!out.empty(), "{}: empty list", option);
    return out;
}

std::vector<std::string> split_names(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ';'))
        if (!item.empty()) out.push_back(item);
    return out;
}

std::string quoted(const std::string& s) {
    std::string q = "'";
    for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
}

/// scripts/plot_roofline.py beside the source tree (compiled-in presets dir's sibling) or ./scripts.
std::string plot_script() {
    if (const char* env = std::getenv("AQPIM_PLOT_ROOFLINE"); env && *env) return env;
    for (const fs::path& p : {presets_dir().parent_path() / "scripts/plot_roofline.py", fs::path("scripts/plot_roofline.py")})
        if (fs::exists(p)) return p.string();
    AQPIM_FAIL("--plot: cannot find scripts/plot_roofline.py (set AQPIM_PLOT_ROOFLINE to its path)");
}

/// The interpreter that draws: $AQPIM_PYTHON, else the first of python3 on PATH and /usr/bin/python3
/// (Debian's python3-matplotlib) that imports matplotlib. Checked before any work is done.
std::string plot_python(const std::string& file) {
    const std::string ext = fs::path(file).extension().string();
    AQPIM_CHECK(ext == ".png" || ext == ".svg" || ext == ".pdf", "--plot {}: the file name must end in .png, .svg or .pdf", file);
    std::vector<std::string> candidates = {"python3", "/usr/bin/python3"};
    if (const char* env = std::getenv("AQPIM_PYTHON"); env && *env) candidates = {env};
    for (const std::string& py : candidates)
        if (std::system((quoted(py) + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) return py;
    AQPIM_FAIL("--plot needs {} with matplotlib, which is not importable (Debian: apt-get install python3-matplotlib; or set "
               "AQPIM_PYTHON to an interpreter that has it)", candidates.front());
}

/// Write the report as JSON beside the picture and draw it.
void plot(const std::string& python, const Report& report, const std::string& file) {
    const std::string script = plot_script();
    const std::string data = fs::path(file).replace_extension(".json").string();
    write_output_file(data, report.to_json().dump(1) + "\n", "--plot");
    const int rc = std::system((quoted(python) + " " + quoted(script) + " " + quoted(data) + " " + quoted(file)).c_str());
    AQPIM_CHECK(rc == 0, "--plot {}: {} failed (exit status {})", file, script, rc);
    fmt::print(stderr, "plot written to {} (data: {})\n", file, data);
}

void print_presets() {
    for (const char* kind : {"model", "device", "energy", "validation"}) {
        fmt::print("{} presets ({}):\n", kind, (presets_dir() / kind).string());
        for (const std::string& n : preset_names(kind)) fmt::print("  {:<22} {}\n", n, find_preset(kind, n).description());
    }
    fmt::print("device cpu: this machine, bandwidth measured by a quick probe\n");
}

Report build_report(const RooflineArgs& a) {
    Report r;
    if (a.table == "validate") {
        r.header = {{"table", "validate"}};
        r.tables = validate_tables(a.validation);
        return r;
    }
    AQPIM_CHECK(!a.model_file.empty() || !a.preset.empty(), "give a model: --preset NAME (see --list) or -m FILE");
    RooflineSetup s;
    s.model = a.model_file.empty() ? find_perf_model(a.preset) : perf_model_from_file(a.model_file);
    s.device = find_device(a.device);
    s.run = a.run;
    s.run.validate();
    AQPIM_CHECK(s.run.pp <= s.model.n_layer, "--pp {}: more pipeline stages than the model's {} layers", s.run.pp,
                s.model.n_layer);
    AQPIM_CHECK(s.run.tp <= s.model.n_head, "--tp {}: more tensor-parallel devices than the model's {} heads", s.run.tp,
                s.model.n_head);
    (void)parse_kv_scheme(s.run.kv_scheme);
    s.batches = parse_list<int>("--batches", a.batches, 1, 1 << 20);
    s.contexts = parse_list<std::int64_t>("--contexts", a.contexts, 1, std::int64_t(1) << 24);
    s.kv_schemes = split_names(a.kv_list);
    AQPIM_CHECK(!s.kv_schemes.empty(), "--kv-list: no schemes");
    s.energy_tables = split_names(a.energy);
    AQPIM_CHECK(!s.energy_tables.empty(), "--energy: no energy tables");
    const double wbits = s.run.weight_bits > 0 ? s.run.weight_bits : s.model.weight_bits;
    r.header = {{"model", fmt::format("{} ({} layers, n_embd {}, n_ff {}, {} heads, {} KV heads, head_dim {}, vocab {}{})", s.model.name,
                                      s.model.n_layer, s.model.n_embd, s.model.n_ff, s.model.n_head, s.model.n_kv_head, s.model.head_dim,
                                      s.model.n_vocab, s.model.n_expert > 1 ? fmt::format(", {} experts, {} per token", s.model.n_expert, s.model.n_expert_used) : "")},
                {"model_source", s.model.source},
                {"device", fmt::format("{}: {}", s.device.name, s.device.description)},
                {"roofs", fmt::format("{:.3g} TB/s{} x eff {:.2f}; f16 {:.4g} TFLOP/s, int8 {:.4g} TOP/s x eff {:.2f}; {:.1f} GB",
                                      s.device.stream_bandwidth() / 1e12, s.device.is_pim() ? " (inside the DRAM)" : "",
                                      s.run.eff_bandwidth > 0 ? s.run.eff_bandwidth : s.device.eff_bandwidth,
                                      (s.device.is_pim() ? s.device.pim_compute : s.device.compute_f16) / 1e12,
                                      (s.device.is_pim() ? s.device.pim_compute : s.device.compute_int8) / 1e12,
                                      s.run.eff_compute > 0 ? s.run.eff_compute : s.device.eff_compute, s.device.mem_capacity / 1e9)},
                {"run", fmt::format("batch {}, context {}, prompt {}, weights {:g} bits, activations {:g} bits, KV {}, tp {}, pp {}", s.run.batch,
                                    s.run.context, s.run.prompt, wbits, s.run.act_bits, s.run.kv_scheme, s.run.tp, s.run.pp)},
                {"peak_bandwidth_Bps", s.device.stream_bandwidth() * (s.run.eff_bandwidth > 0 ? s.run.eff_bandwidth : s.device.eff_bandwidth)},
                {"peak_compute_FLOPs", (s.device.is_pim() ? s.device.pim_compute : s.device.compute_f16) * (s.run.eff_compute > 0 ? s.run.eff_compute : s.device.eff_compute)},
                {"capacity_bytes", s.device.mem_capacity},
                {"weight_bytes_per_device", weight_bytes_per_device(s.model, s.run)},
                {"table", a.table}};
    if (a.table == "summary") r.tables = summary_tables(s);
    else if (a.table == "batch") r.tables = {batch_table(s)};
    else if (a.table == "context") r.tables = {context_table(s)};
    else if (a.table == "quant") r.tables = {quant_table(s)};
    else if (a.table == "energy") r.tables = {energy_table(s)};
    else if (a.table == "devices") r.tables = {devices_table(s)};
    else if (a.table == "all") {
        r.tables = summary_tables(s);
        for (Table t : {batch_table(s), context_table(s), quant_table(s), energy_table(s)}) r.tables.push_back(std::move(t));
    } else {
        AQPIM_FAIL("--table {}: unknown (summary, batch, context, quant, energy, devices, validate, all)", a.table);
    }
    return r;
}

}  // namespace

void add_roofline_command(CLI::App& app) {
    auto a = std::make_shared<RooflineArgs>();
    auto* cmd = app.add_subcommand("roofline",
                                   "the memory-wall model: FLOPs, bytes, roofline, KV capacity and energy of LLM decoding and "
                                   "prefill for a model on a device (docs/roofline.md)");
    cmd->add_option("--preset", a->preset, "model preset name or .json (see --list): llama2-7b, qwen2-72b, qwen-72b-as-written, ...");
    cmd->add_option("-m,--model", a->model_file, "model file instead of a preset (header only): .gguf, safetensors dir or config.json, llama2.c .bin");
    cmd->add_option("--device", a->device, "device preset name or .json (see --list), or cpu (measured)")->capture_default_str();
    cmd->add_option("--table", a->table, "summary | batch | context | quant | energy | devices | validate | all")->capture_default_str();
    cmd->add_option("-b,--batch", a->run.batch, "sequences decoded together")->capture_default_str();
    cmd->add_option("-c,--context", a->run.context, "tokens each sequence holds at the decode step")->capture_default_str();
    cmd->add_option("-p,--prompt", a->run.prompt, "prefill length")->capture_default_str();
    cmd->add_option("--wbits", a->run.weight_bits, "bits per weight (default: the model's; 4.5 = Q4_0, 8.5 = Q8_0)")
        ->check(finite_range(1, 32));
    cmd->add_option("--abits", a->run.act_bits, "bits per activation (<= 8 with <= 8-bit weights: integer roof)")->capture_default_str();
    cmd->add_option("--kv", a->run.kv_scheme, "KV scheme (f16, int8, int4, q8_0, q4_0, kivi2, pq[:...]): exact bits from the cache's accounting")->capture_default_str();
    cmd->add_option("--tp", a->run.tp, "tensor-parallel devices")->capture_default_str();
    cmd->add_option("--pp", a->run.pp, "pipeline stages")->capture_default_str();
    cmd->add_option("--eff-bw", a->run.eff_bandwidth, "achievable fraction of memory bandwidth (default: the device's)")
        ->check(finite_range(0, 1, true));
    cmd->add_option("--eff-compute", a->run.eff_compute, "achievable fraction of compute (default: the device's)")
        ->check(finite_range(0, 1, true));
    auto launch_us = std::make_shared<double>(-1);
    cmd->add_option("--launch-us", *launch_us, "fixed cost per kernel launch in microseconds (default: the device's; 0 = pure roofline)")
        ->check(finite_range(0, 999));
    cmd->add_option("--batches", a->batches, "batch sizes of --table batch")->capture_default_str();
    cmd->add_option("--contexts", a->contexts, "contexts of --table context")->capture_default_str();
    cmd->add_option("--kv-list", a->kv_list, "KV schemes of --table quant, ';'-separated")->capture_default_str();
    cmd->add_option("--energy", a->energy, "energy presets of --table energy, ';'-separated")->capture_default_str();
    cmd->add_option("--validation", a->validation, "validation preset of --table validate")->capture_default_str();
    cmd->add_flag("--json", a->json, "print JSON");
    cmd->add_flag("--csv", a->csv, "print CSV (each table after a '# name: title' line)");
    cmd->add_option("--plot", a->plot, "also draw the report (roofline with operating points; KV growth) to FILE.png|svg|pdf, "
                                       "data beside it as FILE.json (needs python3-matplotlib)");
    cmd->add_flag("--list", a->list, "list the model, device, energy and validation presets");
    cmd->callback([a, launch_us] {
        if (a->list) return print_presets();
        AQPIM_CHECK(!(a->json && a->csv), "--json and --csv: choose one");
        AQPIM_CHECK(a->model_file.empty() || a->preset.empty(), "-m and --preset: choose one");
        AQPIM_CHECK(*launch_us < 0 || *launch_us < 1000, "--launch-us {}: must be below 1000", *launch_us);
        a->run.kernel_overhead = *launch_us < 0 ? -1 : *launch_us * 1e-6;
        if (!a->plot.empty())
            for (const std::string& out : {a->plot, fs::path(a->plot).replace_extension(".json").string()})
                check_output_not_input(out, {a->preset, a->model_file, a->device, a->validation}, "--plot");
        const std::string python = a->plot.empty() ? "" : plot_python(a->plot);
        const Report r = build_report(*a);
        fmt::print("{}", a->json ? r.to_json().dump(2) + "\n" : a->csv ? r.csv() : r.text());
        if (!a->plot.empty()) plot(python, r, a->plot);
    });
}

}  // namespace aqpim::cli
