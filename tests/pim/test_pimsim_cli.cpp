// `aqpim pimsim` end to end: validation, JSON report, command trace, and refusals of bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/cli.h"

using aqpim::test::run_cli;

namespace {

nlohmann::json json_of(const std::string& out) { return nlohmann::json::parse(out.substr(out.find('{'))); }

TEST(PimsimCli, ValidateAttAccJson) {
    const auto r = run_cli("pimsim --validate attacc --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = json_of(r.output);
    EXPECT_TRUE(j["pass"].get<bool>());
    ASSERT_EQ(j["cases"].size(), 6u);
    for (const auto& c : j["cases"]) EXPECT_LE(std::abs(c["error"].get<double>()), 0.10) << c.dump();
}

TEST(PimsimCli, ReportJsonHasEveryPart) {
    const auto r = run_cli("pimsim --json --context 4096 --layers 4 --placement bank");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = json_of(r.output);
    ASSERT_EQ(j["runs"].size(), 2u);
    EXPECT_EQ(j["runs"][0]["workload"], "fp16");
    EXPECT_EQ(j["runs"][1]["workload"], "pq");
    for (const auto& run : j["runs"]) {
        EXPECT_GT(run["seconds"].get<double>(), 0);
        EXPECT_GT(run["energy"]["total_j"].get<double>(), 0);
        EXPECT_TRUE(run["phases"].contains("score"));
    }
    EXPECT_GT(j["capacity"]["pq_batch"].get<long>(), j["capacity"]["f16_batch"].get<long>());
    EXPECT_LT(j["capacity"]["pq_bits_per_element"].get<double>(), 4.0);
}

TEST(PimsimCli, CommandTraceFormat) {
    const auto path = std::filesystem::temp_directory_path() / "aqpim_pimsim_trace.txt";
    const auto r = run_cli("pimsim --context 512 --layers 1 --kv-heads 1 --heads 1 --placement bank --workload fp16 "
                           "--trace-commands " + path.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(path);
    std::string header, line;
    std::getline(in, header);
    EXPECT_EQ(header.rfind("# aqpim pimsim command trace", 0), 0u);
    std::getline(in, line);
    EXPECT_EQ(line.rfind("0 WRGB ", 0), 0u) << line;
    long n = 1, prev = 0;
    while (std::getline(in, line)) {
        const long t = std::stol(line);
        EXPECT_GE(t, prev);
        prev = t;
        ++n;
    }
    EXPECT_GT(n, 30);
    std::filesystem::remove(path);
}

TEST(PimsimCli, BadInputIsRefused) {
    for (const char* args : {"pimsim --dram nosuch", "pimsim --placement socket", "pimsim --workload int4",
                             "pimsim --heads 30 --kv-heads 8", "pimsim --context 0", "pimsim --kv q4_0",
                             "pimsim --kv pq:m=48", "pimsim --validate ramulator", "pimsim --gpu nosuch"}) {
        const auto r = run_cli(args);
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.output.find("rror"), std::string::npos) << args << ": " << r.output;
    }
}

}  // namespace
