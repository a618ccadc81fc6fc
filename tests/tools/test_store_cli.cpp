// `aqpim bench serve --kv-store` end to end on a small model (every section, with the numbers that
// must hold whatever the machine: f16 is its own baseline, int8 stores fewer bytes, a repeated
// system prompt hits), and `aqpim serve` refusing bad store options with one clear line.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include "support/cli.h"
#include "support/temp_dir.h"

using aqpim::test::run_cli;
using aqpim::test::shared_dir;

namespace {

const std::string kStoriesGguf = shared_dir() + "/models/stories260K/stories260K.gguf";

TEST(StoreCli, BenchServeMeasuresEveryTierAndSection) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const std::string dir = aqpim::test::temp_path("store-cli-disk"), err = aqpim::test::temp_path("store-cli.err");
    const auto r = run_cli("-t 1 bench serve -m " + kStoriesGguf + " --kv 'f16;int8:g=8' --kv-store memory --kv-store disk:" + dir +
                           " --prompt-tokens 128 --suffix-tokens 8 --kv-store-block 32 --prefill-chunk 32 --repeats 1"
                           " --workload-prefix-tokens 64 --workload-suffix-tokens 96 --shared-prefixes 1 --requests 6 --clients 1 -n 2"
                           " --json 2>" + err);
    const auto stderr_text = [&] {
        std::ifstream f(err);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    ASSERT_EQ(r.exit_code, 0) << r.output << stderr_text();
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    // every figure and warning, should an assertion below fail (one did once in a full ctest -j2, unreproduced)
    SCOPED_TRACE(j.dump() + "\n" + stderr_text());
    ASSERT_EQ(j["rows"].size(), 6u);  // 2 schemes x (store bytes, ttft, workload)
    const auto& f16 = j["rows"][0];
    const auto& int8 = j["rows"][3];
    EXPECT_EQ(f16["section"], "store bytes");
    EXPECT_EQ(f16["blocks"], 4);  // 136 tokens: 4 whole blocks of 32
    EXPECT_DOUBLE_EQ(f16["x_smaller_than_f16"].get<double>(), 1.0);
    // f16 stores 16 bits per element and a few bytes of ops and headers; int8 g=8 12
    EXPECT_GT(int8["x_smaller_than_f16"].get<double>(), 1.25);
    EXPECT_LT(int8["x_smaller_than_f16"].get<double>(), 16.0 / 12);
    EXPECT_EQ(int8["restored_tokens"], 128);
    for (const char* k : {"memory_reported_kib_per_1k", "disk_reported_kib_per_1k", "read_kib_per_1k"})
        EXPECT_GT(int8[k].get<double>(), 0.0) << k;
    const auto& ttft = j["rows"][1];
    EXPECT_EQ(ttft["section"], "ttft");
    for (const char* k : {"fresh_s", "hit_memory_s", "hit_disk_s"}) EXPECT_GT(ttft[k].get<double>(), 0.0) << k;
    const auto& load = j["rows"][2];
    EXPECT_EQ(load["section"], "workload");
    // One client: the first request misses, whatever the timing. The later ones find the system
    // prompt's blocks once the store's writer has written them; it writes beside the engine, so
    // on a quiet machine 3 or 4 of 6 hit, and on a loaded one (ctest -j2 beside two busy loops, 1
    // run in 20 of `bench serve` alone) none did: no lower bound holds. What does: a hit restores
    // at most the shared 64-token prefix, never a request's own 96 tokens.
    const double hit_rate = load["hit_rate"].get<double>();
    EXPECT_GE(hit_rate, 0.0);
    EXPECT_LE(hit_rate, 5.0 / 6.0 + 1e-9);
    const double restored_pct = load["prompt_tokens_restored_pct"].get<double>();
    EXPECT_LE(restored_pct, 100.0 * hit_rate * 64.0 / 160.0 + 1e-9);
    EXPECT_EQ(restored_pct > 0, hit_rate > 0) << restored_pct << " " << hit_rate;
}

TEST(StoreCli, ServeRefusesBadStoreOptions) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
             {"--kv-store tape:/dev/st0", "--kv-store tape:/dev/st0: not a store"},
             {"--kv-store memory:lots", "not a size"},
             {"--kv-store memory --kv-store-block 100", "--kv-store-block 100 must be a positive multiple of --prefill-chunk"},
             {"--kv-store redis://h:99999", "port"}}) {
        const auto r = run_cli("serve -m " + kStoriesGguf + " --kv f16 --port 0 " + args);
        EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
        EXPECT_NE(r.output.find(want), std::string::npos) << args << "\n" << r.output;
        EXPECT_NE(r.output.find("aqpim: error:"), std::string::npos) << r.output;
    }
}

}  // namespace
