// `aqpim roofline` end to end: JSON, CSV, model files, and refusals of bad input.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "support/cli.h"

using aqpim::test::run_cli;
using aqpim::test::shared_dir;

TEST(RooflineCli, JsonDecodeOfLlama2_7bOnH100) {
    const auto r = run_cli("roofline --preset llama2-7b --device h100-sxm --context 1000 --prompt 2048 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    const auto& cap = j["tables"]["capacity"]["rows"];
    bool seen = false;
    for (const auto& row : cap)
        if (row["quantity"] == "KV bytes per token (one sequence, all devices)") {
            EXPECT_EQ(row["value"].get<double>(), 524288.0);
            seen = true;
        }
    EXPECT_TRUE(seen) << r.output;
    const auto& roof = j["tables"]["roofline"]["rows"];
    EXPECT_EQ(roof[0]["phase"], "decode");
    EXPECT_EQ(roof[0]["bound"], "memory");
    EXPECT_EQ(roof[1]["bound"], "compute");
}

TEST(RooflineCli, TablesAndCsv) {
    for (const char* t : {"batch", "context", "quant", "energy", "devices", "validate"}) {
        const auto r = run_cli(std::string("roofline --preset llama3-8b --table ") + t);
        EXPECT_EQ(r.exit_code, 0) << t << "\n" << r.output;
    }
    const auto r = run_cli("roofline --preset qwen2-72b --tp 4 --table batch --batches 1,8 --csv");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("# batch: "), std::string::npos);
    EXPECT_NE(r.output.find("\nbatch,GFLOP,"), std::string::npos);
    EXPECT_NE(r.output.find("\n8,"), std::string::npos);
}

TEST(RooflineCli, BitsTargetsAreStatedAtTheRunsContext) {
    // pq:bits= needs the context it is stated at: the run's -c (it used to fail asking for one).
    for (const char* t : {"summary", "quant"}) {
        const auto r = run_cli(std::string("roofline --preset llama3-8b -c 4096 --kv pq:bits=2 --kv-list "
                                           "\"f16;pq:bits=2\" --json --table ") + t);
        ASSERT_EQ(r.exit_code, 0) << t << "\n" << r.output;
        EXPECT_NE(r.output.find("pq:bits=2"), std::string::npos) << r.output;
    }
}

TEST(RooflineCli, ModelFilesHeaderOnly) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    for (const std::string m : {"/models/austen-13m", "/models/stories260K/stories260K.gguf", "/models/stories260K/stories260K.bin"}) {
        const auto r = run_cli("roofline -m " + shared_dir() + m + " --device a100-80g");
        EXPECT_EQ(r.exit_code, 0) << m << "\n" << r.output;
        EXPECT_NE(r.output.find("Decode step"), std::string::npos) << r.output;
    }
}

TEST(RooflineCli, BadInputIsAClearError) {
    const struct {
        const char* args;
        const char* want;
    } cases[] = {
        {"roofline --preset no-such-model", "unknown model preset \"no-such-model\""},
        {"roofline --preset llama2-7b --device nope", "unknown device preset \"nope\""},
        {"roofline --preset llama2-7b --batch 0", "--batch 0"},
        {"roofline --preset llama2-7b --kv nonsense", "nonsense"},
        {"roofline --preset llama2-7b --table nonsense", "--table nonsense: unknown"},
        {"roofline --preset llama2-7b --batches 1,x --table batch", "--batches"},
        {"roofline --preset llama2-7b --eff-bw 2", "--eff-bw: value 2 is not a finite number in (0, 1]"},
        {"roofline --preset llama2-7b --launch-us 5000", "--launch-us: value 5000"},
        {"roofline", "give a model"},
        {"roofline --preset /nonexistent/x.json", "preset /nonexistent/x.json: no such file"},
        {"roofline -m /nonexistent.gguf", "no such file"},
        {"roofline --preset llama2-7b --plot out.txt", "must end in .png"},
    };
    for (const auto& c : cases) {
        const auto r = run_cli(c.args);
        EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find(c.want), std::string::npos) << c.args << "\n" << r.output;
    }
    // A missing matplotlib (here: a missing interpreter) is an error that says so, before any work.
    setenv("AQPIM_PYTHON", "/nonexistent/python3", 1);
    const auto r = run_cli("roofline --preset llama2-7b --plot /tmp/aqpim-roofline-test.png");
    unsetenv("AQPIM_PYTHON");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("matplotlib"), std::string::npos) << r.output;
}

TEST(RooflineCli, PlotDrawsRooflineAndKvGrowth) {
    if (std::system("python3 -c 'import matplotlib' >/dev/null 2>&1") != 0 &&
        std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "no python3 with matplotlib";
    for (const char* table : {"batch", "context"}) {
        const std::string png = std::string("/tmp/aqpim-roofline-plot-") + table + ".png";
        std::remove(png.c_str());
        const auto r = run_cli(std::string("roofline --preset llama3-8b --table ") + table + " --plot " + png);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        FILE* f = std::fopen(png.c_str(), "rb");
        ASSERT_NE(f, nullptr) << png;
        unsigned char magic[4] = {};
        EXPECT_EQ(std::fread(magic, 1, 4, f), 4u);
        std::fclose(f);
        EXPECT_EQ(magic[1], 'P');  // \x89PNG
        EXPECT_EQ(magic[2], 'N');
    }
}
