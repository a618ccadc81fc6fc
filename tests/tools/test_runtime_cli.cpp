// `aqpim run`, `ppl`, `info -m` and `bench decode` end to end on the shared models, and their
// refusals of bad input.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/cli.h"

using aqpim::test::run_cli;
using aqpim::test::shared_dir;

namespace {
const std::string kStoriesBin = shared_dir() + "/models/stories260K/stories260K.bin";
const std::string kStoriesGguf = shared_dir() + "/models/stories260K/stories260K.gguf";

/// The rows of `aqpim bench decode -m stories260K.gguf ARGS --json` (none, reported, if it failed).
nlohmann::json bench_decode_rows(const std::string& args) {
    const auto r = run_cli("bench decode -m " + kStoriesGguf + " " + args + " --json 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    if (r.exit_code != 0) return nlohmann::json::array();
    return nlohmann::json::parse(r.output.substr(r.output.find('{')))["rows"];
}
}  // namespace

TEST(RuntimeCli, RunStreamsTextAndReportsSpeed) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    const auto r = run_cli("run -m " + kStoriesBin + " -p 'Once upon a time' -n 24 --seed 5 --temp 0.8");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // stderr's model line, then the text on stdout (prompt echoed first), then the speed report.
    const auto text = [](const std::string& s) {
        const std::size_t b = s.find('\n') + 1;
        return s.substr(b, s.find("\n\n", b) - b);
    };
    EXPECT_EQ(text(r.output).rfind("Once upon a time", 0), 0u) << r.output;
    EXPECT_GT(text(r.output).size(), 40u) << r.output;
    EXPECT_NE(r.output.find("tokens/s"), std::string::npos);
    EXPECT_NE(r.output.find("GB/s"), std::string::npos);
    // Same seed, same text; another seed, other text.
    const auto again = run_cli("run -m " + kStoriesBin + " -p 'Once upon a time' -n 24 --seed 5 --temp 0.8");
    const auto other = run_cli("run -m " + kStoriesBin + " -p 'Once upon a time' -n 24 --seed 6 --temp 0.8");
    EXPECT_EQ(text(r.output), text(again.output));
    EXPECT_NE(text(r.output), text(other.output));
}

TEST(RuntimeCli, PplJsonMatchesLlamaCpp) {
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const auto r = run_cli("ppl -m " + kStoriesGguf + " -f " + shared_dir() +
                           "/text/tinystories-valid.txt -c 256 --kv f32 --json 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_NEAR(j["ppl"].get<double>(), 6.2132, 6.2132e-3);
    EXPECT_EQ(j["n_chunks"].get<int>(), 60);
}

TEST(RuntimeCli, InfoDescribesAModel) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    const auto r = run_cli("info -m " + shared_dir() + "/models/austen-13m");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* want : {"architecture: llama", "4 layers", "2 KV heads (GQA 2:1)", "head_dim 128", "F16", "f16"})
        EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

TEST(RuntimeCli, InfoSizesSequencesAgainstABudget) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    // austen-13m: 4 layers x 2 KV heads x 128 dims x K,V = 2048 elements per token.
    const auto r = run_cli("info -m " + shared_dir() + "/models/austen-13m --context 2048 --budget 64MiB --kv 'f16;q4_0;int3'");
    EXPECT_EQ(r.exit_code, 1) << r.output;  // int3 is no scheme: the table, then an error
    EXPECT_NE(r.output.find("--kv: 1 of the schemes named cannot size this model"), std::string::npos) << r.output;
    const auto line = [&](const std::string& scheme) {
        const std::size_t b = r.output.find("\n  " + scheme + " ");
        return b == std::string::npos ? std::string() : r.output.substr(b + 1, r.output.find('\n', b + 1) - b - 1);
    };
    // f16: 4096 bytes/token, 8 MiB per sequence -> 8 fit; q4_0: 4.5 bits -> 1152 bytes/token -> 28.
    EXPECT_NE(line("f16").find(" 8388608 "), std::string::npos) << r.output;
    EXPECT_EQ(line("f16").substr(line("f16").size() - 2), " 8") << r.output;
    EXPECT_NE(line("q4_0").find("4.500"), std::string::npos) << r.output;
    EXPECT_EQ(line("q4_0").substr(line("q4_0").size() - 3), " 28") << r.output;
    EXPECT_NE(line("int3").find("n/a"), std::string::npos) << r.output;  // unknown scheme named, others still sized
}

TEST(RuntimeCli, BadInputFailsWithOneClearLine) {
    AQPIM_REQUIRE_SHARED("reference/tokens/probe.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const std::string tmp = (std::filesystem::temp_directory_path() / "aqpim_runtime_cli_truncated.gguf").string();
    {
        std::ifstream in(kStoriesGguf, std::ios::binary);
        std::string head(5000, '\0');
        in.read(head.data(), 5000);
        std::ofstream(tmp, std::ios::binary).write(head.data(), 5000);
    }
    const std::pair<std::string, std::string> cases[] = {
        {"run -m /nonexistent/model.gguf", "no such file"},
        {"run -m " + kStoriesBin + " --kv int3", "--kv int3"},
        {"run -m " + kStoriesBin + " --top-p 0", "top-p"},
        {"run -m " + tmp, "gguf"},
        {"ppl -m " + kStoriesGguf + " -f /nonexistent.txt", "-f /nonexistent.txt: no such file"},
        {"info -m " + kStoriesGguf + " --budget 12parsecs", "--budget"},
        {"ppl -m " + kStoriesGguf + " -f " + shared_dir() + "/reference/tokens/probe.txt -c 256", "fewer than one chunk"},
    };
    for (const auto& [args, want] : cases) {
        const auto r = run_cli(args);
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.output.find(want), std::string::npos) << args << "\n" << r.output;
        EXPECT_EQ(r.output.find("terminate"), std::string::npos) << args;
    }
    std::filesystem::remove(tmp);
}

TEST(RuntimeCli, BenchDecodeReportsTheRoof) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const auto rows = bench_decode_rows("--quick --prompt-tokens 16 -n 8");
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_GT(rows[0]["gbytes_per_s"].get<double>(), 0.0);
    EXPECT_GT(rows[2]["tokens_per_s"].get<double>(), 0.0);
}

TEST(RuntimeCli, BenchDecodeComparesSchemesWhereTheCacheDominates) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const auto rows = bench_decode_rows("--contexts 64,160 --batch 1,2 --kv 'f16;int8:g=8' -n 2");
    ASSERT_EQ(rows.size(), 8u);  // 2 batches x 2 contexts x 2 schemes
    for (const auto& row : rows) {
        EXPECT_GT(row["tokens_per_s"].get<double>(), 0.0);
        const double bits = row["bits_per_element"].get<double>();
        EXPECT_DOUBLE_EQ(bits, row["kv"] == "f16" ? 16.0 : 12.0) << row.dump();  // int8 g=8: 8 + 2x16/8
    }
    EXPECT_DOUBLE_EQ(rows[0]["vs_f16"].get<double>(), 1.0);
    EXPECT_FALSE(rows[0]["batch_invariant"].get<bool>());
}

TEST(RuntimeCli, BenchDecodeInterleavesSchemesUnlessSequential) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    // 5 steps: a round of 4 and a partial one; both timings must run every step of every scheme,
    // so each cache ends holding the same tokens (64 filled + 1 untimed + 5 timed).
    const std::string args = "--contexts 64 --batch 2 --kv 'f16;int8:g=8' -n 5";
    const auto interleaved = bench_decode_rows(args);
    const auto sequential = bench_decode_rows(args + " --sequential");
    ASSERT_EQ(interleaved.size(), 2u);
    ASSERT_EQ(sequential.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(interleaved[i]["timing"], "interleaved");
        EXPECT_EQ(sequential[i]["timing"], "sequential");
        EXPECT_EQ(interleaved[i]["kv"], sequential[i]["kv"]);
        EXPECT_GT(interleaved[i]["tokens_per_s"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(interleaved[i]["kv_mib"].get<double>(), sequential[i]["kv_mib"].get<double>()) << i;
    }
    // 2 sequences x 70 tokens x 2 (K, V) x layers x kv heads x head_dim f16 elements
    const double f16_mib = 2.0 * 70 * 2 * 5 * 4 * 8 * 2 / 1048576.0;
    EXPECT_DOUBLE_EQ(interleaved[0]["kv_mib"].get<double>(), f16_mib);
}

TEST(RuntimeCli, BenchDecodeDecodesAsTheServerWhenAsked) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const auto rows = bench_decode_rows("--contexts 64 --batch 4 --kv 'f16;pq' -n 2 --batch-invariant");
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& row : rows) {
        EXPECT_TRUE(row["batch_invariant"].get<bool>()) << row.dump();
        EXPECT_GT(row["tokens_per_s"].get<double>(), 0.0);
    }
    // Without KV-dominated mode the flag has nothing to act on: an error, not a silent no-op.
    EXPECT_NE(run_cli("bench decode -m " + kStoriesGguf + " --batch-invariant 2>&1").exit_code, 0);
}
