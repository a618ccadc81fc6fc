#pragma once
// Subcommands of the `aqpim` command. Each add_* registers one subcommand on the app; its
// callback runs the command and throws aqpim::Error on bad input (main prints it, exits 1).

#include <CLI/CLI.hpp>

namespace aqpim::cli {

void add_info_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_ppl_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_roofline_command(CLI::App& app);
void add_pimsim_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace aqpim::cli
