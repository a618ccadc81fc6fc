// KV traces: the caches' layouts, `aqpim run --trace`, reading traces back, trace-driven pimsim.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/kv_trace.h"
#include "aqpim/pim_trace.h"
#include "support/cli.h"

namespace aqpim {
namespace {

KvShape tiny_shape() {
    KvShape s;
    s.n_layer = 1;
    s.n_kv_head = 1;
    s.head_dim = 8;
    return s;
}

void append_random(KvCache& c, std::int64_t n) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    std::vector<float> k(std::size_t(n) * 8), v(k.size());
    for (auto& x : k) x = d(rng);
    for (auto& x : v) x = d(rng);
    c.append(0, 0, n, k.data(), v.data());
}

TEST(KvLayout, DenseCacheIsOneUncodedSpan) {
    auto c = make_kv_cache(parse_kv_scheme("f16"), tiny_shape());
    c->add_sequence(0);
    append_random(*c, 3);
    const auto spans = c->layout(0, 0);
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].first, 0);
    EXPECT_EQ(spans[0].n, 3);
    EXPECT_EQ(spans[0].version, -1);
}

TEST(KvLayout, PqCacheSplitsAtVersionsAndPages) {
    auto c = make_kv_cache(parse_kv_scheme("pq:m=4,calib=16,refresh=32,page=32,sinks=2,window=8"), tiny_shape());
    c->add_sequence(0);
    append_random(*c, 100);
    // k = 98 coded-eligible; version 3 starts at 96 but is untrained, so coded = min(98 - 8, 96) = 90.
    const std::vector<KvSpan> want = {{0, 2, -1, -1}, {2, 32, 0, 0}, {34, 32, 1, 1}, {66, 26, 2, 2}, {92, 8, -1, -1}};
    const auto got = c->layout(0, 0);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].first, want[i].first) << i;
        EXPECT_EQ(got[i].n, want[i].n) << i;
        EXPECT_EQ(got[i].version, want[i].version) << i;
        EXPECT_EQ(got[i].page, want[i].page) << i;
    }
}

TEST(KvTraceCli, RunWritesATracePimsimReplays) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    const auto path = std::filesystem::temp_directory_path() / "aqpim_run_trace.jsonl";
    const auto r = test::run_cli("run -m " + test::shared_dir() + "/models/stories260K/stories260K.bin -p 'Once upon' "
                                 "-n 60 --seed 3 --ignore-eos --kv pq:calib=16,window=8,refresh=32,page=32,sinks=2 --trace " +
                                 path.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const KvTrace t = read_kv_trace(path.string());
    EXPECT_EQ(t.model, "stories260K");
    EXPECT_EQ(t.n_layer, 5);
    EXPECT_EQ(t.n_kv_head, 4);
    EXPECT_EQ(t.last_step(), 59);
    EXPECT_EQ(t.records.size(), std::size_t(60 * t.n_layer));
    EXPECT_NE(t.scheme.find("refresh=32"), std::string::npos);
    // Tokens grow by one per step.
    EXPECT_EQ(t.records.back().seqs[0].tokens - t.records.front().seqs[0].tokens, 59);
    const PimTraceStep last = pim_trace_step(t, -1);
    EXPECT_EQ(last.shape.kv_heads, 5 * 4);
    EXPECT_EQ(last.shape.group, 2);
    EXPECT_EQ(last.shape.context, t.records.back().seqs[0].tokens + 1);
    EXPECT_GE(last.versions, 2);
    EXPECT_GE(last.f16_tokens, 1 + 2 + 8);
    EXPECT_THROW(pim_trace_step(t, 60), Error);

    const auto p = test::run_cli("pimsim --json --placement bank --kv-trace " + path.string());
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const auto j = nlohmann::json::parse(p.output.substr(p.output.find('{')));
    EXPECT_NE(j["model"].get<std::string>().find("step 59"), std::string::npos);
    EXPECT_EQ(j["shape"]["kv_heads"], 20);
    std::filesystem::remove(path);
}

TEST(KvTraceRead, BadTracesAreErrorsNamingTheLine) {
    const auto path = std::filesystem::temp_directory_path() / "aqpim_bad_trace.jsonl";
    const std::string header =
        R"({"format":"aqpim-kv-trace","version":1,"model":"m","scheme":"pq","n_layer":2,"n_head":4,"n_kv_head":2,"head_dim":8})";
    auto expect_error = [&](const std::string& text, const std::string& what) {
        std::ofstream(path) << text;
        try {
            read_kv_trace(path.string());
            FAIL() << "no error for: " << what;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    expect_error("{\"format\":\"other\"}\n", "not an aqpim-kv-trace");
    expect_error(header + "\nnot json\n", ":2: not valid JSON");
    // a shape or a length no model has: refused before anything is sized by it
    expect_error(R"({"format":"aqpim-kv-trace","version":1,"model":"m","scheme":"pq","n_layer":2,"n_head":4,"n_kv_head":2,"head_dim":1073741824})",
                 ":1: header: head_dim = 1073741824 is out of range [1, 1024]");
    expect_error(R"({"format":"aqpim-kv-trace","version":1,"model":"m","scheme":"pq","n_layer":2147483647,"n_head":4,"n_kv_head":2,"head_dim":8})",
                 "n_layer = 2147483647 is out of range");
    expect_error(header + "\n{\"step\":0,\"layer\":0,\"seqs\":[{\"seq\":0,\"tokens\":9223372036854775807,\"spans\":[]}]}\n",
                 ":2: sequence 0: tokens = 9223372036854775807 is out of range");
    expect_error(header + "\n{\"step\":0,\"layer\":0,\"seqs\":" + std::string(100000, '[') + "\n", ":2: JSON nested deeper");
    expect_error(header + "\n{\"step\":0,\"layer\":5,\"seqs\":[]}\n", ":2: layer 5 out of range");
    expect_error(header + "\n{\"step\":0,\"layer\":0,\"seqs\":[{\"seq\":0,\"tokens\":5,\"spans\":[[0,2,-1,-1],[3,2,-1,-1]]}]}\n",
                 "do not tile");
    expect_error(header + "\n{\"step\":0,\"layer\":0,\"seqs\":[{\"seq\":0,\"tokens\":5,\"spans\":[[0,2,-1,-1]]}]}\n",
                 "cover 2 of 5");
    expect_error(header + "\n{\"step\":0,\"layer\":0}\n", ":2: missing or mistyped");
    std::filesystem::remove(path);
    EXPECT_THROW(read_kv_trace(path.string()), Error);
}

}  // namespace
}  // namespace aqpim
