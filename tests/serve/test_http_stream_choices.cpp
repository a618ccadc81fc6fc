// Streaming several choices (several prompts, n > 1) as OpenAI does: each chunk names its choice
// by index, a choice's chunks come in order and end with its finish_reason, and what a choice's
// chunks add up to is the choice the same request gives whole.

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;

serve::EngineOptions engine_options() {
    serve::EngineOptions o = test::small_engine("pq:calib=16,refresh=0,window=4,sinks=2");
    o.threads = 2;
    o.prefill_chunk = 32;
    return o;
}

/// One choice as its chunks built it.
struct Streamed {
    std::vector<json> chunks;  ///< its choice objects, in order
    std::string text;          ///< text (chat: delta.content) concatenated
    json tokens = json::array(), token_logprobs = json::array(), text_offset = json::array();
};

/// The stream's events by choice index; `usage` gets the usage chunk when there is one.
std::map<std::size_t, Streamed> by_choice(const std::string& body, bool chat, json* usage = nullptr) {
    bool framing_ok = false;
    const std::vector<std::string> events = test::sse_data(body, &framing_ok);
    EXPECT_TRUE(framing_ok);
    EXPECT_FALSE(events.empty());
    if (events.empty()) return {};
    EXPECT_EQ(events.back(), "[DONE]");
    std::map<std::size_t, Streamed> out;
    for (std::size_t e = 0; e + 1 < events.size(); ++e) {
        const json j = json::parse(events[e]);
        EXPECT_EQ(j["object"], chat ? "chat.completion.chunk" : "text_completion");
        if (j["choices"].empty()) {  // the usage chunk: the last before [DONE]
            EXPECT_EQ(e + 2, events.size());
            if (usage) *usage = j["usage"];
            continue;
        }
        EXPECT_EQ(j["choices"].size(), 1u);
        const json& c = j["choices"][0];
        Streamed& s = out[c["index"].get<std::size_t>()];
        EXPECT_TRUE(s.chunks.empty() || s.chunks.back()["finish_reason"].is_null())
            << "choice " << c["index"] << " has a chunk after its finish_reason";
        s.chunks.push_back(c);
        s.text += chat ? c["delta"].value("content", "") : c["text"].get<std::string>();
        if (!c["logprobs"].is_null()) {
            for (const json& v : c["logprobs"]["tokens"]) s.tokens.push_back(v);
            for (const json& v : c["logprobs"]["token_logprobs"]) s.token_logprobs.push_back(v);
            for (const json& v : c["logprobs"]["text_offset"]) s.text_offset.push_back(v);
        }
    }
    return out;
}

TEST(HttpStreamChoices, SeveralPromptsTimesNStreamEachChoiceAsTheWholeResponse) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, engine_options());
    auto c = s.client();
    json body = {{"prompt", {"Catherine Morland", "She was fond of"}}, {"n", 2}, {"max_tokens", 6},
                 {"temperature", 1.0}, {"seed", 7}, {"echo", true}, {"logprobs", 1}};
    auto whole_r = test::post_json(c, "/v1/completions", body);
    ASSERT_TRUE(whole_r && whole_r->status == 200);
    const json whole = json::parse(whole_r->body);
    ASSERT_EQ(whole["choices"].size(), 4u);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto r = test::post_json(c, "/v1/completions", body);
    ASSERT_TRUE(r && r->status == 200);
    json usage;
    const std::map<std::size_t, Streamed> streamed = by_choice(r->body, false, &usage);
    ASSERT_EQ(streamed.size(), 4u);
    for (const auto& [i, st] : streamed) {
        ASSERT_LT(i, 4u);
        const json& w = whole["choices"][i];
        EXPECT_EQ(st.text, w["text"]) << "choice " << i;
        EXPECT_EQ(st.chunks.back()["finish_reason"], w["finish_reason"]) << "choice " << i;
        // Its logprobs as the whole response's: the echoed prompt's, then each generated token's,
        // offsets counted within the choice's own text.
        EXPECT_EQ(st.tokens, w["logprobs"]["tokens"]) << "choice " << i;
        EXPECT_EQ(st.token_logprobs, w["logprobs"]["token_logprobs"]) << "choice " << i;
        EXPECT_EQ(st.text_offset, w["logprobs"]["text_offset"]) << "choice " << i;
    }
    EXPECT_NE(streamed.at(0).text, streamed.at(1).text) << "choice j of a prompt draws with seed + j";
    EXPECT_EQ(usage, whole["usage"]) << "a prompt counts once, whatever n";
    for (const json& slot : json::parse(c.Get("/slots")->body)) EXPECT_TRUE(test::slot_free(slot)) << slot;
}

TEST(HttpStreamChoices, ChatWithNStreamsARoleChunkThenDeltasPerChoice) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, engine_options());
    auto c = s.client();
    json body = {{"messages", {{{"role", "user"}, {"content", "Who is Mr Tilney?"}}}}, {"max_tokens", 6},
                 {"temperature", 1.0}, {"seed", 40}, {"n", 3}};
    auto whole_r = test::post_json(c, "/v1/chat/completions", body);
    ASSERT_TRUE(whole_r && whole_r->status == 200);
    const json whole = json::parse(whole_r->body);
    body["stream"] = true;
    auto r = test::post_json(c, "/v1/chat/completions", body);
    ASSERT_TRUE(r && r->status == 200);
    const std::map<std::size_t, Streamed> streamed = by_choice(r->body, true);
    ASSERT_EQ(streamed.size(), 3u);
    for (const auto& [i, st] : streamed) {
        ASSERT_GE(st.chunks.size(), 2u);
        EXPECT_EQ(st.chunks.front()["delta"], (json{{"role", "assistant"}, {"content", ""}})) << "choice " << i;
        EXPECT_EQ(st.text, whole["choices"][i]["message"]["content"]) << "choice " << i;
        EXPECT_EQ(st.chunks.back()["finish_reason"], whole["choices"][i]["finish_reason"]) << "choice " << i;
    }
}

TEST(HttpStreamChoices, ConcurrentMultiChoiceStreamsEachEqualTheirWholeResponse) {
    // 8 clients at once, each streaming 2 prompts x n = 2 (32 sequences interleaved in the engine,
    // 8 writers each waiting on its own request's wakeup): every choice's text is the one the same
    // request gives whole and alone afterwards.
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o = test::small_engine("pq:calib=16,refresh=0,window=4,sinks=2");
    o.parallel = 32;
    o.queue_capacity = 32;
    o.ctx = 128;
    test::TestServer s(m, o);
    auto body = [](int i) {
        return json{{"prompt", {"a b c " + std::to_string(i), "d e " + std::to_string(i)}}, {"n", 2}, {"max_tokens", 24},
                    {"temperature", 0.9}, {"seed", 500 + i}};
    };
    constexpr int kClients = 8;
    std::vector<std::string> streamed(kClients);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
        clients.emplace_back([&, i] {
            auto c = s.client(120);
            json b = body(i);
            b["stream"] = true;
            auto r = test::post_json(c, "/v1/completions", b);
            streamed[std::size_t(i)] = r && r->status == 200 ? r->body : "";
        });
    for (auto& t : clients) t.join();
    auto c = s.client(120);
    for (int i = 0; i < kClients; ++i) {
        auto w = test::post_json(c, "/v1/completions", body(i));
        ASSERT_TRUE(w && w->status == 200);
        const json whole = json::parse(w->body);
        const std::map<std::size_t, Streamed> got = by_choice(streamed[std::size_t(i)], false);
        ASSERT_EQ(got.size(), 4u) << "client " << i;
        for (const auto& [k, st] : got) EXPECT_EQ(st.text, whole["choices"][k]["text"]) << "client " << i << " choice " << k;
    }
    EXPECT_EQ(s.engine->stats().active, 0);
    EXPECT_EQ(s.engine->stats().kv_bytes_reserved, s.engine->stats().prompt_cache.bytes_reserved);
    test::drop_prompt_cache(*s.engine);
    EXPECT_EQ(s.engine->stats().kv_bytes_reserved, 0u);
}

}  // namespace
}  // namespace aqpim
