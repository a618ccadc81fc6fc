// aqpim serve's endpoints against hand-checked expectations: completions and chat, whole and
// streamed, their usage, logprobs and stops, and the endpoints around them (issue 19).

#include <gtest/gtest.h>

#include "serve/chat_template.h"
#include "serve/text_stream.h"
#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;

using test::small_engine;

json completion_body(int max_tokens, std::uint64_t seed = 3) {
    return {{"model", "x"}, {"prompt", "the quick brown fox jumps over"}, {"max_tokens", max_tokens},
            {"temperature", 0.8}, {"top_p", 0.9}, {"seed", seed}};
}

/// The tokens the engine itself generates for a request (no HTTP), as text.
std::string engine_text(const LoadedModel& m, const serve::GenerationRequest& r) {
    serve::EngineOptions o = small_engine();
    o.eos_token = m.tokenizer->eos();
    serve::Engine e(m.weights, o);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::vector<std::int32_t> out;
    EXPECT_TRUE(e.submit(r, [&](const serve::TokenEvent& ev) {
                    std::lock_guard<std::mutex> lk(mu);
                    if (ev.finish == serve::FinishReason::none) out.push_back(ev.token);
                    else done = true;
                    cv.notify_all();
                    return false;
                }).ok());
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done; });
    std::string text;
    std::int32_t prev = r.prompt.back();
    for (std::int32_t t : out) text += m.tokenizer->piece(prev, t), prev = t;
    return text;
}

TEST(HttpEndpoints, CompletionMatchesTheEngineWithUsageAndLogprobs) {
    const LoadedModel& m = test::synth_serve_model();
    test::TestServer s(m, small_engine());
    auto c = s.client();
    json body = completion_body(8);
    body["logprobs"] = 3;
    auto r = test::post_json(c, "/v1/completions", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["model"], m.weights.config.name.empty() ? "aqpim" : m.weights.config.name);
    EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
    const json& choice = j["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "length");

    serve::GenerationRequest g;
    g.prompt = m.tokenizer->encode("the quick brown fox jumps over", true);
    g.max_tokens = 8;
    g.sampler = {0.8f, 0.9f, 3};
    EXPECT_EQ(choice["text"], serve::valid_utf8(engine_text(m, g)));  // random weights emit stray byte tokens
    EXPECT_EQ(j["usage"]["prompt_tokens"], int(g.prompt.size()));
    EXPECT_EQ(j["usage"]["completion_tokens"], 8);
    EXPECT_EQ(j["usage"]["total_tokens"], int(g.prompt.size()) + 8);

    const json& lp = choice["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 8u);
    std::string joined;
    std::size_t offset = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        EXPECT_EQ(lp["text_offset"][i], offset);
        joined += lp["tokens"][i].get<std::string>();
        offset += lp["tokens"][i].get<std::string>().size();
        EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
        // keyed by text: alternatives with the same text (stray bytes become U+FFFD) share a key
        EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
        EXPECT_LE(lp["top_logprobs"][i].size(), 3u);
        double best = -1e9;
        for (const auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
        EXPECT_GE(best + 1e-6, lp["token_logprobs"][i].get<double>());  // the chosen one is never above the best
    }
    EXPECT_EQ(joined, choice["text"]);
}

TEST(HttpEndpoints, StreamIsServerSentEventsWithTheSameTextAndUsage) {
    const LoadedModel& m = test::synth_serve_model();
    test::TestServer s(m, small_engine());
    auto c = s.client();
    auto whole = test::post_json(c, "/v1/completions", completion_body(10, 11));
    ASSERT_TRUE(whole && whole->status == 200);
    json body = completion_body(10, 11);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto r = test::post_json(c, "/v1/completions", body);
    ASSERT_TRUE(r && r->status == 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    bool framing = false;
    const auto events = test::sse_data(r->body, &framing);
    EXPECT_TRUE(framing) << r->body;
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    for (std::size_t i = 0; i + 3 < events.size(); ++i) {
        const json e = json::parse(events[i]);
        EXPECT_EQ(e["object"], "text_completion");
        EXPECT_TRUE(e["choices"][0]["finish_reason"].is_null());
        text += e["choices"][0]["text"].get<std::string>();
    }
    const json last = json::parse(events[events.size() - 3]);
    EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
    const json usage = json::parse(events[events.size() - 2]);
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 10);
    const json w = json::parse(whole->body);
    EXPECT_EQ(text, w["choices"][0]["text"]);
    EXPECT_EQ(usage["usage"], w["usage"]);
}

TEST(HttpEndpoints, StopStringCutsTheTextWholeAndStreamed) {
    const LoadedModel& m = test::synth_serve_model();
    test::TestServer s(m, small_engine());
    auto c = s.client();
    json body = completion_body(24, 5);
    body["temperature"] = 0;
    auto full = test::post_json(c, "/v1/completions", body);
    ASSERT_TRUE(full && full->status == 200);
    const std::string text = json::parse(full->body)["choices"][0]["text"];
    ASSERT_GE(text.size(), 12u) << text;
    std::size_t at = text.size() / 2;  // three ASCII characters from the middle on
    while (at + 3 <= text.size() && !(text[at] > 0 && text[at + 1] > 0 && text[at + 2] > 0)) ++at;
    ASSERT_LE(at + 3, text.size()) << text;
    const std::string stop = text.substr(at, 3);
    const std::string expect = text.substr(0, text.find(stop));
    body["stop"] = json::array({"\x01never", stop});
    for (bool stream : {false, true}) {
        body["stream"] = stream;
        auto r = test::post_json(c, "/v1/completions", body);
        ASSERT_TRUE(r && r->status == 200);
        std::string got, finish;
        if (!stream) {
            const json j = json::parse(r->body);
            got = j["choices"][0]["text"];
            finish = j["choices"][0]["finish_reason"];
            EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 24);
        } else {
            for (const std::string& e : test::sse_data(r->body)) {
                if (e == "[DONE]") continue;
                const json j = json::parse(e);
                got += j["choices"][0]["text"].get<std::string>();
                if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
            }
        }
        EXPECT_EQ(got, expect) << "stream " << stream << ", stop '" << stop << "'";
        EXPECT_EQ(finish, "stop");
    }
}

TEST(HttpEndpoints, ChatUsesTheTemplateAndStreamsDeltas) {
    const LoadedModel& m = test::synth_serve_model();
    test::TestServer s(m, small_engine());
    auto c = s.client();
    const json messages = json::array({{{"role", "system"}, {"content", "be brief"}},
                                       {{"role", "user"}, {"content", "hello there"}}});
    json body = {{"model", "x"}, {"messages", messages}, {"max_tokens", 6}, {"seed", 9},
                 {"logprobs", true}, {"top_logprobs", 2}};
    auto r = test::post_json(c, "/v1/chat/completions", body);
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    const std::string prompt = serve::render_chat(serve::ChatFormat::plain, {{"system", "be brief"}, {"user", "hello there"}}, {});
    EXPECT_EQ(prompt, "be brief\n\nUser: hello there\nAssistant:");
    EXPECT_EQ(j["usage"]["prompt_tokens"], int(m.tokenizer->encode(prompt, true).size()));
    const json& content = j["choices"][0]["logprobs"]["content"];
    std::string joined;
    for (const json& t : content) {
        joined += t["token"].get<std::string>();
        EXPECT_EQ(t["top_logprobs"].size(), 2u);
        EXPECT_EQ(t["bytes"].size(), t["token"].get<std::string>().size());
    }
    EXPECT_EQ(joined, j["choices"][0]["message"]["content"]);

    body["stream"] = true;
    body.erase("logprobs");
    body.erase("top_logprobs");
    auto st = test::post_json(c, "/v1/chat/completions", body);
    ASSERT_TRUE(st && st->status == 200);
    const auto events = test::sse_data(st->body);
    ASSERT_GE(events.size(), 3u);
    const json first = json::parse(events[0]);
    EXPECT_EQ(first["object"], "chat.completion.chunk");
    EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
    std::string text;
    for (std::size_t i = 1; i + 1 < events.size(); ++i) {
        const json e = json::parse(events[i]);
        if (e["choices"][0]["delta"].contains("content")) text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
    EXPECT_EQ(text, j["choices"][0]["message"]["content"]);
}

TEST(HttpEndpoints, ModelsHealthSlotsAndMetrics) {
    const LoadedModel& m = test::synth_serve_model();
    serve::ServerOptions so;
    so.model_alias = "synth-a";
    test::TestServer s(m, small_engine("pq"), so);
    auto c = s.client();
    auto h = c.Get("/health");
    ASSERT_TRUE(h && h->status == 200);
    EXPECT_EQ(json::parse(h->body)["status"], "ok");
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models && models->status == 200);
    const json mj = json::parse(models->body);
    EXPECT_EQ(mj["object"], "list");
    EXPECT_EQ(mj["data"][0]["id"], "synth-a");
    EXPECT_EQ(mj["data"][0]["meta"]["kv"], "pq");
    EXPECT_EQ(mj["data"][0]["meta"]["n_ctx"], 512);
    auto props = c.Get("/props");  // llama-server's
    ASSERT_TRUE(props && props->status == 200);
    const json pj = json::parse(props->body);
    EXPECT_EQ(pj["default_generation_settings"]["n_ctx"], 512);
    EXPECT_EQ(pj["default_generation_settings"]["params"]["n_predict"], so.default_max_tokens);
    EXPECT_EQ(pj["total_slots"], 4);
    EXPECT_EQ(pj["model_alias"], "synth-a");
    EXPECT_EQ(pj["modalities"]["vision"], false);
    EXPECT_EQ(pj["chat_template"], m.tokenizer->vocab().chat_template);
    auto slots = c.Get("/slots");
    ASSERT_TRUE(slots && slots->status == 200);
    const json sj = json::parse(slots->body);
    ASSERT_EQ(sj.size(), 4u);
    for (const json& slot : sj) EXPECT_EQ(slot["state"], "idle");

    ASSERT_TRUE(test::post_json(c, "/v1/completions", completion_body(5))->status == 200);
    auto met = c.Get("/metrics");
    ASSERT_TRUE(met && met->status == 200);
    const std::string& t = met->body;
    for (const char* name : {"aqpim_requests_total{outcome=\"finished\"} 1", "aqpim_generated_tokens_total 5",
                             "# TYPE aqpim_kv_budget_bytes gauge", "aqpim_kv_budget_bytes 67108864",
                             "aqpim_sequences_active 0", "aqpim_sequences_queued 0",
                             "# TYPE aqpim_time_to_first_token_seconds histogram",
                             "aqpim_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
                             "aqpim_time_to_first_token_seconds_count 1",
                             "aqpim_time_per_output_token_seconds_count 4", "aqpim_kv_bits_per_element",
                             "aqpim_decode_tokens_per_second", "aqpim_kv_pages_in_use",
                             "# TYPE aqpim_scratch_bytes gauge", "aqpim_scratch_bytes{part=\"kv_cache\"} ",
                             "aqpim_http_responses_total{status=\"200\"}"})
        EXPECT_NE(t.find(name), std::string::npos) << name << "\n" << t;
    // The forward pass's scratch of the request that ran: counted, not zero.
    const std::string scratch = "\naqpim_scratch_bytes{part=\"model\"} ";
    const std::size_t at = t.find(scratch);
    ASSERT_NE(at, std::string::npos) << t;
    EXPECT_GT(std::stod(t.substr(at + scratch.size())), 0.0);
}

}  // namespace
}  // namespace aqpim
