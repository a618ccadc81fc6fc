// The `aqpim` command: one binary, subcommands registered from tools/cmd_*.cpp.

#include <cstdio>
#include <exception>
#include <string>

#include "aqpim/error.h"
#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "commands.h"

int main(int argc, char** argv) {
    CLI::App app{"aqpim: adaptive product quantization of the LLM KV cache, attention on codes"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "aqpim 0.1.0");
    std::string simd;
    int threads = 0;
    app.add_option("--simd", simd, "force the kernel level: ref, avx2 or avx512 (default: best the CPU has)");
    app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(1, 1024));
    app.parse_complete_callback([&] {
        if (!simd.empty()) aqpim::set_simd_level(aqpim::parse_simd_level(simd));
        if (threads > 0) aqpim::set_default_threads(threads);
    });

    app.fallthrough();  // global options (-t, --simd) also after the subcommand name
    aqpim::cli::add_info_command(app);
    aqpim::cli::add_bench_command(app);
    aqpim::cli::add_demo_command(app);
    aqpim::cli::add_synth_command(app);
    aqpim::cli::add_convert_command(app);
    aqpim::cli::add_run_command(app);
    aqpim::cli::add_ppl_command(app);
    aqpim::cli::add_eval_command(app);
    aqpim::cli::add_roofline_command(app);
    aqpim::cli::add_pimsim_command(app);
    aqpim::cli::add_serve_command(app);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        // Bad options read like every other error: one line naming what is wrong, exit status 1.
        std::fprintf(stderr, "aqpim: error: %s\nRun with --help for more information.\n", e.what());
        return 1;
    } catch (const aqpim::Error& e) {
        std::fprintf(stderr, "aqpim: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "aqpim: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
