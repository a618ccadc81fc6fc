// `aqpim info`: what this build and CPU can do.

#include <fmt/format.h>

#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "commands.h"

namespace aqpim::cli {

void add_info_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("info", "show the CPU's SIMD levels and the active kernel level");
    cmd->callback([] {
        fmt::print("simd levels supported:");
        for (SimdLevel l : supported_simd_levels()) fmt::print(" {}", simd_level_name(l));
        fmt::print("\nsimd level active:    {}\nthreads:              {}\n", simd_level_name(active_simd_level()),
                   default_threads());
    });
}

}  // namespace aqpim::cli
