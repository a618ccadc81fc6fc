// aqpim serve under load and across a save/restore: 64 concurrent streams each identical to the
// same request alone, the pool empty afterwards; a slot saved, erased, restored and continued over
// HTTP gives exactly the text of one uninterrupted request (issue 19).

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "serve/http_test_util.h"
#include "support/shared_data.h"

namespace aqpim {
namespace {

using nlohmann::json;

std::string stream_text(const httplib::Result& r) {
    if (!r) return "<error " + httplib::to_string(r.error()) + ">";
    if (r->status != 200) return "<status " + std::to_string(r->status) + ": " + r->body + ">";
    std::string text;
    bool done = false;
    for (const std::string& e : test::sse_data(r->body)) {
        if (e == "[DONE]") {
            done = true;
            continue;
        }
        text += json::parse(e)["choices"][0]["text"].get<std::string>();
    }
    return done ? text : "<no [DONE]>";
}

TEST(HttpLoad, SixtyFourStreamsEachEqualTheRequestAlone) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/austen-13m-f16.gguf");
    const LoadedModel m = load_model(test::shared_path("models/austen-13m/austen-13m-f16.gguf"));
    serve::EngineOptions o;
    o.kv = "pq:calib=24,refresh=0,window=8,sinks=4";  // coded after 24 tokens: the streams attend through codes
    o.kv_budget_bytes = 512ULL << 20;
    o.parallel = 64;
    o.ctx = 128;
    o.prefill_chunk = 32;
    test::TestServer s(m, o);
    const char* words[] = {"It was", "Emma", "The morning", "Catherine", "She had", "Mr. Knightley", "Upon", "Her"};
    auto body = [&](int i) {
        return json{{"prompt", fmt::format("{} {} said that the", words[i % 8], i)}, {"max_tokens", 24},
                    {"temperature", 0.9}, {"top_p", 0.95}, {"seed", 100 + i}, {"stream", true}};
    };
    constexpr int kClients = 64;
    std::vector<std::string> together(kClients);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
        clients.emplace_back([&, i] {
            auto c = s.client(120);
            together[std::size_t(i)] = stream_text(test::post_json(c, "/v1/completions", body(i)));
        });
    for (auto& t : clients) t.join();
    const serve::EngineStats after = s.engine->stats();
    EXPECT_EQ(after.active, 0);
    EXPECT_EQ(after.kv_bytes_reserved, after.prompt_cache.bytes_reserved);  // only the finished sequences kept
    EXPECT_EQ(after.prompt_cache.sequences, kClients);
    EXPECT_EQ(after.requests_finished, std::uint64_t(kClients));

    auto c = s.client(120);
    for (int i = 0; i < kClients; ++i) {
        const std::string alone = stream_text(test::post_json(c, "/v1/completions", body(i)));
        EXPECT_EQ(together[std::size_t(i)], alone) << "client " << i;
        EXPECT_FALSE(alone.empty() || alone[0] == '<') << alone;
    }
    EXPECT_EQ(s.engine->stats().kv_bytes_used, after.kv_bytes_used);
    EXPECT_EQ(s.engine->stats().prompt_cache.hits, 0u) << "no prompt begins with another's whole sequence";
    EXPECT_EQ(test::drop_prompt_cache(*s.engine), kClients);
    EXPECT_EQ(s.engine->stats().kv_bytes_reserved, 0u);
    EXPECT_EQ(s.engine->stats().pages_in_use, 0);
}

TEST(HttpLoad, SlotSavedErasedRestoredContinuesExactly) {
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o;
    o.kv = "pq:calib=16,refresh=0,window=4,sinks=2";
    o.kv_budget_bytes = 64ULL << 20;
    o.parallel = 2;
    o.ctx = 256;
    o.threads = 1;
    serve::ServerOptions so;
    so.slot_save_path = test::temp_path("");
    test::TestServer s(m, o, so);
    auto c = s.client();
    const json base = {{"prompt", "once upon a time there was a"}, {"temperature", 0.9}, {"seed", 77}};
    json whole = base;
    whole["max_tokens"] = 20;
    whole["cache_prompt"] = false;  // its sequence is not kept: the budget holds the parked one only
    auto w = test::post_json(c, "/v1/completions", whole);
    ASSERT_TRUE(w && w->status == 200);
    const std::string expect = json::parse(w->body)["choices"][0]["text"];

    json first = base;
    first["max_tokens"] = 12;
    first["keep_slot"] = true;
    auto a = test::post_json(c, "/v1/completions", first);
    ASSERT_TRUE(a && a->status == 200);
    const std::string part1 = json::parse(a->body)["choices"][0]["text"];
    int parked = -1;
    for (const json& slot : json::parse(c.Get("/slots")->body))
        if (slot["state"] == "parked") parked = slot["id"];
    ASSERT_GE(parked, 0);
    const std::string sp = "/slots/" + std::to_string(parked);
    auto saved = c.Post((sp + "?action=save&filename=conv1.kvs").c_str(), "", "application/json");
    ASSERT_TRUE(saved && saved->status == 200) << (saved ? saved->body : "");
    EXPECT_GT(json::parse(saved->body)["n_written"].get<long>(), 0);
    auto erased = c.Post((sp + "?action=erase").c_str(), "", "application/json");
    ASSERT_TRUE(erased && erased->status == 200) << erased->body;
    EXPECT_EQ(s.engine->stats().kv_bytes_reserved, 0u);
    for (const bool stream : {false, true}) {  // the erased slot is idle: nothing to continue, a 400 up front
        auto idle = test::post_json(c, "/v1/completions", {{"prompt", "x"}, {"id_slot", parked}, {"stream", stream}});
        ASSERT_TRUE(idle);
        EXPECT_EQ(idle->status, 400) << idle->body;
        EXPECT_EQ(json::parse(idle->body)["error"]["param"], "id_slot") << idle->body;
    }
    EXPECT_EQ(c.Post("/slots/1?action=restore&filename=missing.kvs", "", "application/json")->status, 400);
    auto unnamed = c.Post("/slots/1?action=restore", R"({"file": "conv1.kvs"})", "application/json");
    EXPECT_EQ(unnamed->status, 400);
    EXPECT_EQ(json::parse(unnamed->body)["error"]["param"], "filename") << unnamed->body;
    // llama-server's form: the file named in the body.
    auto restored = c.Post("/slots/1?action=restore", R"({"filename": "conv1.kvs"})", "application/json");
    ASSERT_TRUE(restored && restored->status == 200) << restored->body;

    auto b = test::post_json(c, "/v1/completions", {{"prompt", ""}, {"id_slot", 1}, {"max_tokens", 8}});
    ASSERT_TRUE(b && b->status == 200) << b->body;
    EXPECT_EQ(part1 + json::parse(b->body)["choices"][0]["text"].get<std::string>(), expect);
}

}  // namespace
}  // namespace aqpim
