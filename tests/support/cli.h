#pragma once
// Run the built `aqpim` command and capture what it prints.

#include <array>
#include <cstdio>
#include <string>

#include "support/shared_data.h"

namespace aqpim::test {

struct CliResult {
    int exit_code;
    std::string output;  // stdout and stderr together
};

inline CliResult run_cli(const std::string& args) {
    const std::string cmd = std::string(AQPIM_CLI_PATH) + " " + args + " 2>&1";
    CliResult r{-1, {}};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf;
    std::size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

}  // namespace aqpim::test
