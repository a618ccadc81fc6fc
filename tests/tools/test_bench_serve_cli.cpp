// `aqpim bench serve` without a store: --requests gives every scheme the same number of requests
// (handed to whichever client is free), whatever number of sequences the scheme fits; --passes runs
// every scheme again, the order alternating, and sums them; --turns runs conversations, every scheme
// with the prompt cache off and on, and with --kv-store disk:DIR on with that disk tier too.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "support/cli.h"
#include "support/temp_dir.h"

using aqpim::test::run_cli;
using aqpim::test::shared_dir;

namespace {

const std::string kStoriesGguf = shared_dir() + "/models/stories260K/stories260K.gguf";

/// The rows of `bench serve --json` on stories260K with f16 and int8 (24 tokens a sequence: 64 KiB
/// holds 4 of f16, 5 of int8, measured), `args` added; empty after a test failure.
nlohmann::json serve_rows(const std::string& args) {
    const auto r = run_cli("-t 1 bench serve -m " + kStoriesGguf +
                           " --kv 'f16;int8:g=8' --kv-budget 64KiB --prompt-tokens 16 -n 8 --json " + args + " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (r.exit_code != 0) return nlohmann::json::array();
    const auto rows = nlohmann::json::parse(r.output.substr(r.output.find('{')))["rows"];
    EXPECT_EQ(rows.size(), 2u);
    return rows.size() == 2 ? rows : nlohmann::json::array();
}

TEST(BenchServeCli, RequestsAreTheSameForEverySchemeWhateverItFits) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const auto rows = serve_rows("--requests 7");
    ASSERT_EQ(rows.size(), 2u);
    const auto& f16 = rows[0];
    const auto& int8 = rows[1];
    ASSERT_LT(f16["fit"].get<int>(), int8["fit"].get<int>()) << "the budget must fit more int8 sequences than f16";
    ASSERT_LT(int8["fit"].get<int>(), 7) << "every scheme must fit fewer sequences than the requests";
    for (const auto& row : {f16, int8}) {
        EXPECT_EQ(row["requests"], 7) << row.dump();
        EXPECT_EQ(row["out_tokens"], 7 * 8) << row.dump();  // served: 7 requests of 8 tokens
        EXPECT_EQ(row["clients"], row["fit"]) << row.dump();
        EXPECT_GT(row["out_tok_s"].get<double>(), 0.0);
    }
}

TEST(BenchServeCli, PassesRunEverySchemeAgainAndSumThem) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const auto rows = serve_rows("--requests 5 --passes 3");
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& row : rows) {
        EXPECT_EQ(row["passes"], 3) << row.dump();
        EXPECT_EQ(row["requests"], 5) << row.dump();              // per pass
        EXPECT_EQ(row["out_tokens"], 3 * 5 * 8) << row.dump();    // every pass's tokens
        const double ratio = row["tok_s_vs_f16"], lo = row["pass_ratio_min"], hi = row["pass_ratio_max"];
        EXPECT_GT(lo, 0.0) << row.dump();
        // each pass serves the same tokens, so the ratio of the sums lies between the passes' ratios
        EXPECT_LE(lo, ratio * (1 + 1e-9)) << row.dump();
        EXPECT_LE(ratio, hi * (1 + 1e-9)) << row.dump();
    }
    EXPECT_EQ(rows[0]["pass_ratio_min"], 1.0);  // the baseline against itself, every pass
    EXPECT_EQ(rows[0]["pass_ratio_max"], 1.0);
    const auto with_store = run_cli("bench serve -m " + kStoriesGguf + " --passes 2 --kv-store memory");
    EXPECT_NE(with_store.exit_code, 0);
    EXPECT_NE(with_store.output.find("--passes"), std::string::npos) << with_store.output;
}

TEST(BenchServeCli, TurnsRunEverySchemeWithThePromptCacheOffAndOn) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    // Two clients, one conversation of 3 turns each: 16 prompt tokens, then 4 more a turn, 8 out.
    const auto r = run_cli("-t 1 bench serve -m " + kStoriesGguf +
                           " --kv 'f16;int8:g=8' --kv-budget 64KiB --prompt-tokens 16 -n 8 --turns 3 --turn-tokens 4"
                           " --clients 2 --rounds 1 --json 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto rows = nlohmann::json::parse(r.output.substr(r.output.find('{')))["rows"];
    ASSERT_EQ(rows.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
        const auto& row = rows[i];
        const bool cache = i % 2 == 1;
        EXPECT_EQ(row["kv"], i < 2 ? "f16" : "int8:g=8") << row.dump();
        EXPECT_EQ(row["prompt_cache"], cache) << row.dump();
        EXPECT_EQ(row["requests"], 6) << row.dump();
        EXPECT_EQ(row["out_tokens"], 6 * 8) << row.dump();
        // Prompts of 16, 16 + 8 + 4 and 28 + 8 + 4 tokens; a later turn continues the sequence of
        // the turn before, which holds its prompt and 7 of its 8 tokens.
        EXPECT_EQ(row["prompt_cache_hits"], cache ? 4 : 0) << row.dump();
        EXPECT_EQ(row["prompt_tokens_reused"], cache ? 2 * (23 + 35) : 0) << row.dump();
        EXPECT_EQ(row["prefill_tokens"], 2 * (16 + 28 + 40) - (cache ? 2 * (23 + 35) : 0)) << row.dump();
        EXPECT_GT(row["ttft_later_p50_s"].get<double>(), 0.0) << row.dump();
    }
    const auto refused = run_cli("bench serve -m " + kStoriesGguf + " --turns 2 --requests 4");
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_NE(refused.output.find("--turns excludes --requests"), std::string::npos) << refused.output;
}

TEST(BenchServeCli, TurnsWithADiskTierBringDroppedSequencesBackFromIt) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    // Four clients, room for two sequences (24 KiB of f16 a sequence of 40 tokens): the cache drops
    // conversations that come back, from disk when the tier takes them.
    const std::string dir = aqpim::test::temp_path("bench-serve-disk");
    const auto r = run_cli("-t 1 bench serve -m " + kStoriesGguf +
                           " --kv f16 --kv-budget 64KiB --prompt-tokens 16 -n 8 --turns 3 --turn-tokens 4"
                           " --clients 4 --rounds 1 --kv-store disk:" + dir + " --json 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto rows = nlohmann::json::parse(r.output.substr(r.output.find('{')))["rows"];
    ASSERT_EQ(rows.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        const auto& row = rows[i];
        EXPECT_EQ(row["prompt_cache"], i > 0) << row.dump();
        EXPECT_EQ(row["disk_tier"], i == 2) << row.dump();
        EXPECT_EQ(row["fit"], 2) << row.dump();
        EXPECT_EQ(row["prefill_tokens"].get<int>() + row["prompt_tokens_reused"].get<int>() +
                      row["kv_store_tokens_restored"].get<int>(), 4 * (16 + 28 + 40)) << row.dump();
    }
    EXPECT_EQ(rows[0]["prompt_cache_hits"], 0);
    EXPECT_LT(rows[1]["prompt_cache_hits"].get<int>(), 8) << "four conversations in two slots: some were dropped";
    EXPECT_EQ(rows[1]["prompt_cache_disk_hits"], 0);
    EXPECT_EQ(rows[2]["prompt_cache_hits"], 8) << "every later turn continued its sequence, from memory or from disk";
    EXPECT_GE(rows[2]["prompt_cache_disk_hits"].get<int>(), 1);
    EXPECT_EQ(rows[2]["prompt_tokens_reused"], 4 * (23 + 35));
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "each run's directory is removed after it";

    const auto memory = run_cli("bench serve -m " + kStoriesGguf + " --turns 2 --kv-store memory");
    EXPECT_NE(memory.exit_code, 0);
    EXPECT_NE(memory.output.find("a disk:DIR[:BYTES] tier only"), std::string::npos) << memory.output;
    const auto one_turn = run_cli("bench serve -m " + kStoriesGguf + " --turns 1 --kv-store disk:" + dir);
    EXPECT_NE(one_turn.exit_code, 0);
    EXPECT_NE(one_turn.output.find("needs more than one turn"), std::string::npos) << one_turn.output;
    const auto store_option = run_cli("bench serve -m " + kStoriesGguf + " --turns 2 --kv-store disk:" + dir + " --repeats 3");
    EXPECT_NE(store_option.exit_code, 0);
    EXPECT_NE(store_option.output.find("--repeats is for the store's benchmark"), std::string::npos) << store_option.output;
}

TEST(BenchServeCli, RequestsAndRoundsExcludeEachOther) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const auto r = run_cli("bench serve -m " + kStoriesGguf + " --requests 4 --rounds 2");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--rounds excludes --requests"), std::string::npos) << r.output;
}

}  // namespace
