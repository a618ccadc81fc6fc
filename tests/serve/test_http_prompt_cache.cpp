// The prompt cache over HTTP (docs/serve.md "Prompt cache"): a chat's next turn continues the
// sequence of the turn before, usage's prompt_tokens_details.cached_tokens and llama-server's
// tokens_cached count what it did not prefill (also when the sequence comes back from the disk
// tier), cache_prompt false turns it off per request, and /slots and /metrics show it.

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;

TEST(HttpPromptCache, AChatsNextTurnPrefillsOnlyWhatIsNew) {
    test::TestServer s(test::austen_serve_model(), test::small_engine("pq"));
    auto c = s.client();
    json messages = {{{"role", "user"}, {"content", "Tell me about Catherine."}}};
    const json first = test::post(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 20}, {"temperature", 0}});
    EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    ASSERT_EQ(first["choices"][0]["finish_reason"], "length");
    messages.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
    messages.push_back({{"role", "user"}, {"content", "And Henry?"}});
    const json second = test::post(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
    // The first turn's sequence: its prompt and every generated token but the last (drawn, not fed).
    const int held = first["usage"]["prompt_tokens"].get<int>() + 20 - 1;
    EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], held) << second["usage"];
    EXPECT_GT(second["usage"]["prompt_tokens"].get<int>(), held);

    // Off for one request: prefilled whole, and not kept.
    json off = {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"cache_prompt", false}};
    const json fresh = test::post(c, "/v1/chat/completions", off);
    EXPECT_EQ(fresh["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(fresh["usage"]["prompt_tokens"], second["usage"]["prompt_tokens"]);
    int cached = 0;
    for (const json& slot : json::parse(c.Get("/slots")->body)) cached += slot["state"] == "cached";
    EXPECT_EQ(cached, 1) << "the second turn's sequence (it took the first's slot); the third was not kept";
    // A cached slot is idle to /health and holds nothing id_slot could continue (a 400 up front).
    const json health = json::parse(c.Get("/health")->body);
    EXPECT_EQ(health["slots_processing"], 0) << health;
    int cached_id = -1;
    for (const json& slot : json::parse(c.Get("/slots")->body))
        if (slot["state"] == "cached") cached_id = slot["id"];
    const json refused = test::post(c, "/v1/completions", {{"prompt", "x"}, {"id_slot", cached_id}, {"stream", true}}, 400);
    EXPECT_EQ(refused["error"]["param"], "id_slot") << refused;
    const std::string metrics = c.Get("/metrics")->body;
    EXPECT_NE(metrics.find("aqpim_prompt_cache_hits_total 1\n"), std::string::npos);
    EXPECT_NE(metrics.find(fmt::format("aqpim_prompt_cache_tokens_total {}\n", held)), std::string::npos);
    EXPECT_NE(metrics.find("aqpim_prompt_cache_sequences 1\n"), std::string::npos);
}

TEST(HttpPromptCache, LlamaServersTokensCachedAndItsCachePromptField) {
    test::TestServer s(test::synth_serve_model(), test::small_engine("f16"));
    auto c = s.client();
    const json prompt = {1, 17, 42, 99, 7, 300, 5, 8};
    const json first = test::post(c, "/completion", {{"prompt", prompt}, {"n_predict", 6}, {"temperature", 0},
                                                     {"return_tokens", true}});
    EXPECT_EQ(first["tokens_cached"], 0);
    json next = prompt;
    for (const json& t : first["tokens"]) next.push_back(t);
    next.push_back(12);
    next.push_back(13);
    json r;
    for (const bool cache : {false, true}) {  // off first: it neither continues nor keeps a sequence
        r = test::post(c, "/completion", {{"prompt", next}, {"n_predict", 4}, {"temperature", 0}, {"cache_prompt", cache},
                                          {"return_tokens", true}});
        EXPECT_EQ(r["tokens_cached"], cache ? 8 + 6 - 1 : 0) << r;
        EXPECT_EQ(r["timings"]["prompt_n"], cache ? 1 + 2 : 8 + 6 + 2) << r["timings"];
    }
    // A salted request shares nothing with unsalted ones (vLLM's cache_salt, on /completion too).
    json salted_next = next;
    salted_next.push_back(9);
    const json salted = test::post(c, "/completion", {{"prompt", salted_next}, {"n_predict", 2}, {"temperature", 0},
                                                     {"cache_salt", "tenant"}});
    EXPECT_EQ(salted["tokens_cached"], 0) << salted;
    // The OpenAI endpoint continues the same conversation, and counts it in its usage.
    for (const json& t : r["tokens"]) next.push_back(t);
    next.push_back(14);
    const json v1 = test::post(c, "/v1/completions", {{"prompt", next}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(v1["usage"]["prompt_tokens_details"]["cached_tokens"], 16 + 4 - 1) << v1["usage"];
    EXPECT_EQ(test::post(c, "/v1/completions", {{"prompt", next}, {"cache_prompt", 1}}, 400)["error"]["param"], "cache_prompt");
}

TEST(HttpPromptCache, AConversationBackFromDiskCountsItsCachedTokens) {
    serve::EngineOptions o = test::small_engine("f16");
    o.parallel = 1;  // a second conversation drops the first from memory
    o.kv_store = {"disk:" + test::temp_path("http-prompt-cache-disk")};
    test::TestServer s(test::synth_serve_model(), o);
    auto c = s.client();
    const json a = {1, 17, 42, 99, 7, 300, 5, 8};
    const json first = test::post(c, "/completion", {{"prompt", a}, {"n_predict", 6}, {"temperature", 0}, {"return_tokens", true}});
    test::post(c, "/completion", {{"prompt", {1, 50, 51, 52}}, {"n_predict", 3}, {"temperature", 0}});
    json next = a;
    for (const json& t : first["tokens"]) next.push_back(t);
    next.push_back(12);
    const json r = test::post(c, "/v1/completions", {{"prompt", next}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 8 + 6 - 1) << r["usage"];
    const std::string metrics = c.Get("/metrics")->body;
    EXPECT_NE(metrics.find("aqpim_prompt_cache_disk_hits_total 1\n"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("aqpim_prompt_cache_disk_writes_total 2\n"), std::string::npos);
    EXPECT_NE(metrics.find("aqpim_prompt_cache_disk_sequences 1\n"), std::string::npos);
}

}  // namespace
}  // namespace aqpim
