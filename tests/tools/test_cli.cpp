// The `aqpim` command end to end: real runs, and clear errors with a non-zero exit on bad input.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "aqpim/simd.h"
#include "support/cli.h"

namespace aqpim {
namespace {

using test::run_cli;

TEST(Cli, InfoNamesTheActiveLevel) {
    auto r = run_cli("info");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("simd level active"), std::string::npos) << r.output;
    auto forced = run_cli("--simd ref info");
    EXPECT_NE(forced.output.find("simd level active:    ref"), std::string::npos) << forced.output;
}

TEST(Cli, BadOptionsFailClearly) {
    auto r = run_cli("--simd avx9000 info");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("avx9000"), std::string::npos) << r.output;
    r = run_cli("demo --synthetic -n 0");
    EXPECT_NE(r.exit_code, 0) << r.output;
    r = run_cli("demo --synthetic -n 64 --calib 100");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--calib 100"), std::string::npos) << r.output;
    r = run_cli("demo -m /nonexistent/model");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("/nonexistent/model"), std::string::npos) << r.output;
    r = run_cli("bench pq --sections nonsense");
    EXPECT_NE(r.exit_code, 0) << r.output;
    r = run_cli("frobnicate");
    EXPECT_NE(r.exit_code, 0) << r.output;
    // bench cuda checks its shape before it looks for a GPU.
    r = run_cli("bench cuda --nbits 8 -m 4");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--nbits 8 needs head_dim / m <= 16"), std::string::npos) << r.output;
    r = run_cli("bench cuda -m 48");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("-m 48 must divide"), std::string::npos) << r.output;
    r = run_cli("bench cuda --nbits 6");
    EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(Cli, DemoOnSyntheticDataReportsEveryConfiguration) {
    auto r = run_cli("demo --synthetic -n 300 --calib 128 --queries 4 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output);
    ASSERT_GE(j["rows"].size(), 6u);
    double err16 = 0, err64 = 0;
    for (const auto& row : j["rows"]) {
        EXPECT_GT(row["bits_per_element"].get<double>(), 0.5);
        EXPECT_LT(row["attn_out_rel_err"].get<double>(), 0.5);
        EXPECT_LT(row["mean_kl"].get<double>(), 0.1);
        const auto name = row["config"].get<std::string>();
        if (name.rfind("M=16", 0) == 0) err16 = row["attn_out_rel_err"];
        if (name.rfind("M=64", 0) == 0) err64 = row["attn_out_rel_err"];
    }
    EXPECT_LT(err64, err16);
}

TEST(Cli, DemoOnTheSharedModel) {
    AQPIM_REQUIRE_SHARED("models/austen-13m");
    AQPIM_REQUIRE_SHARED("reference/tokens/austen-13m.northanger-first64KB.ids");
    const std::string model = test::shared_dir() + "/models/austen-13m";
    const std::string ids = test::shared_dir() + "/reference/tokens/austen-13m.northanger-first64KB.ids";
    auto r = run_cli("demo -m " + model + " --ids " + ids + " -n 512 --calib 256 --queries 8 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output);
    // more subspaces must not quantize worse (same data, same calibration)
    double m16 = 0, m64 = 0;
    for (const auto& row : j["rows"]) {
        const auto name = row["config"].get<std::string>();
        if (name.rfind("M=16", 0) == 0) m16 = row["key_rel_mse"];
        if (name.rfind("M=64", 0) == 0) m64 = row["key_rel_mse"];
    }
    EXPECT_GT(m16, 0);
    EXPECT_LT(m64, m16);
}

TEST(Cli, BenchQuickSectionEmitsJson) {
    auto r = run_cli("bench pq --quick --sections int8_error --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output);
    ASSERT_EQ(j["rows"].size(), 3u);
    for (const auto& row : j["rows"])
        EXPECT_LE(row["max_abs_err"].get<double>(), row["bound_M_scale_half"].get<double>());
}

// The stages section: every stage of one attention call timed, per tile in ns/token (with the bytes
// it moves and their rate) and per call in us, and the whole call for each score and value path.
TEST(Cli, BenchStagesCutsOneCallIntoItsStages) {
    auto r = run_cli("bench pq --quick --sections stages --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output);
    int per_tile = 0, per_call = 0, whole = 0;
    for (const auto& row : j["rows"]) {
        ASSERT_EQ(row["section"], "stages");
        const std::string stage = row["stage"];
        if (row["per"] == "tile") {
            const double ns = row["ns_per_token"].get<double>();
            EXPECT_GT(ns, 0.0) << stage;
            // Every tile stage states the bytes it moves per token, and its rate is those bytes / ns.
            ASSERT_TRUE(row.contains("bytes_per_token")) << stage;
            EXPECT_GE(row["bytes_per_token"].get<double>(), 16.0) << stage;  // at least one token's 4-bit codes (M = 32)
            EXPECT_NEAR(row["gbytes_per_s"].get<double>(), row["bytes_per_token"].get<double>() / ns, 1e-9) << stage;
            ++per_tile;
            whole += stage.rfind("whole call", 0) == 0;
        } else {
            EXPECT_GT(row["us_per_call"].get<double>(), 0.0) << stage;
            ++per_call;
        }
    }
    // 4-bit: {f32, int8} scores x {permute, pairs, and bf16 where the CPU has AVX512-BF16} values;
    // scans (2), softmax, its copy, the value passes. 8-bit: {f32, int8} scores x histogram values;
    // scans (by four heads, int8), the histogram.
    const int bf16 = cpu_has_avx512_bf16() ? 1 : 0;
    EXPECT_EQ(whole, 4 + 2 * bf16 + 2);
    EXPECT_EQ(per_tile - whole, 6 + bf16 + 3);
    // 4-bit: tables, int8 tables, columns, clear + fold, histogram x codebook, inverse; 8-bit:
    // tables, their interleaving by four heads, int8 tables, histogram x codebook
    EXPECT_EQ(per_call, 6 + 4);
}

}  // namespace
}  // namespace aqpim
