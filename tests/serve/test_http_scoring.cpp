// Scoring text through aqpim serve, as lm-evaluation-harness's `local-completions` does it:
// `echo` with `logprobs` returns each prompt token's log probability, several prompts (and n
// choices of each) in one request come back as choices in order, and the tokenizer endpoints
// (/tokenize, /detokenize, /tokenizer_info) answer as vLLM's and llama-server's do.

#include <gtest/gtest.h>

#include <cmath>

#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;
using test::post;

serve::EngineOptions engine_options(const std::string& kv = "f16") {
    serve::EngineOptions o = test::small_engine(kv);
    o.threads = 2;
    o.prefill_chunk = 32;  // prompts of several chunks
    return o;
}

/// lm-evaluation-harness's check of a choice's logprobs object: offsets follow the token texts,
/// and the first token (nothing predicted it) has null scores.
void expect_consistent_logprobs(const json& choice) {
    const json& lp = choice["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
    ASSERT_EQ(lp["tokens"].size(), lp["top_logprobs"].size());
    ASSERT_EQ(lp["tokens"].size(), lp["text_offset"].size());
    std::size_t offset = 0;
    std::string text;
    for (std::size_t i = 0; i < lp["tokens"].size(); ++i) {
        EXPECT_EQ(lp["text_offset"][i], offset) << i;
        offset += lp["tokens"][i].get<std::string>().size();
        text += lp["tokens"][i].get<std::string>();
    }
    EXPECT_EQ(choice["text"], text);
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
}

TEST(HttpScoring, EchoScoresAContinuationAsGeneratingItScoredIt) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, engine_options());
    auto c = s.client();
    const std::string prompt = "It was a truth universally acknowledged, that a single man";
    const json gen = post(c, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 1}});
    const json& g = gen["choices"][0]["logprobs"];
    ASSERT_EQ(g["tokens"].size(), 6u);

    // The prompt and the greedy continuation, as the token ids lm-eval sends (one request of one
    // prompt): the continuation's ids from its token texts (the highest id with the text: a byte
    // token shares its text with the normal token of that character, listed after the bytes).
    std::vector<std::int32_t> ids = m.tokenizer->encode(prompt, true);
    const std::size_t ctxlen = ids.size();
    for (const json& piece : g["tokens"]) {
        const std::int32_t prev = ids.back();
        std::int32_t id = m.tokenizer->n_vocab() - 1;
        while (id >= 0 && m.tokenizer->piece(prev, id) != piece.get<std::string>()) --id;
        ASSERT_GE(id, 0) << piece;
        ids.push_back(id);
    }
    const json scored = post(c, "/v1/completions", {{"prompt", json::array({ids})}, {"max_tokens", 1}, {"temperature", 0},
                                                    {"logprobs", 1}, {"echo", true}, {"seed", 1234}});
    ASSERT_EQ(scored["choices"].size(), 1u);
    const json& choice = scored["choices"][0];
    expect_consistent_logprobs(choice);
    const json& lp = choice["logprobs"];
    ASSERT_EQ(lp["token_logprobs"].size(), ids.size() + 1);
    double sum = 0.0, sum_generated = 0.0;
    for (std::size_t i = 0; i < 6; ++i) {
        const double x = lp["token_logprobs"][ctxlen + i].get<double>();
        // Prefill rows and decode steps compute the same scores (f16 cache), to float rounding.
        EXPECT_NEAR(x, g["token_logprobs"][i].get<double>(), 2e-3) << i;
        sum += x;
        sum_generated += g["token_logprobs"][i].get<double>();
        // lm-eval's is_greedy: each continuation token is its row's most likely one.
        double best = -1e30;
        for (const auto& [k, v] : lp["top_logprobs"][ctxlen + i].items()) best = std::max(best, v.get<double>());
        EXPECT_NEAR(best, x, 1e-6) << i;
    }
    EXPECT_NEAR(sum, sum_generated, 1e-2);
    EXPECT_LT(sum, 0.0);
    EXPECT_EQ(scored["usage"]["prompt_tokens"], int(ids.size()));
    EXPECT_EQ(scored["usage"]["completion_tokens"], 1);

    // max_tokens 0 (OpenAI's legacy scoring): the prompt alone, the same scores.
    const json only = post(c, "/v1/completions", {{"prompt", ids}, {"max_tokens", 0}, {"logprobs", 0}, {"echo", true}});
    const json& olp = only["choices"][0]["logprobs"];
    ASSERT_EQ(olp["token_logprobs"].size(), ids.size());
    EXPECT_EQ(olp["token_logprobs"][ctxlen + 3], lp["token_logprobs"][ctxlen + 3]);
    EXPECT_EQ(only["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(only["usage"]["completion_tokens"], 0);
    EXPECT_EQ(post(c, "/v1/completions", {{"prompt", ids}, {"max_tokens", 0}}, 400)["error"]["param"], "max_tokens");

    // A continuation that is EOS is reported (empty text, its logprob), so [ctxlen:-1] still ends
    // at the continuation: as vLLM answers.
    const json eos = post(c, "/v1/completions", {{"prompt", json::array({ids})}, {"max_tokens", 1}, {"temperature", 0},
                                                 {"logprobs", 1}, {"echo", true},
                                                 {"logit_bias", {{std::to_string(m.tokenizer->eos()), 100}}}});
    const json& elp = eos["choices"][0]["logprobs"];
    ASSERT_EQ(elp["token_logprobs"].size(), ids.size() + 1);
    EXPECT_EQ(elp["tokens"].back(), "");
    EXPECT_LT(elp["token_logprobs"].back().get<double>(), 0.0);
    EXPECT_EQ(elp["token_logprobs"][ctxlen + 2], lp["token_logprobs"][ctxlen + 2]);
    EXPECT_EQ(eos["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(eos["usage"]["completion_tokens"], 1);
}

TEST(HttpScoring, SeveralPromptsAreChoicesInOrderEachAsItWouldBeAlone) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, engine_options("pq:calib=16,refresh=0,window=4,sinks=2"));
    auto c = s.client();
    const std::vector<std::string> prompts = {"Catherine Morland", "She was fond of", "The Tilneys called"};
    json alone = json::array();
    int prompt_tokens = 0;
    for (const std::string& p : prompts) {
        const json r = post(c, "/v1/completions", {{"prompt", p}, {"max_tokens", 5}, {"temperature", 0}, {"echo", true}});
        alone.push_back(r["choices"][0]["text"]);
        prompt_tokens += r["usage"]["prompt_tokens"].get<int>();
        EXPECT_EQ(r["choices"][0]["text"].get<std::string>().rfind(p, 0), 0u) << "the echo starts with the prompt";
    }
    EXPECT_NE(alone[0], alone[1]);
    const json all = post(c, "/v1/completions", {{"prompt", prompts}, {"max_tokens", 5}, {"temperature", 0}, {"echo", true}});
    ASSERT_EQ(all["choices"].size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(all["choices"][i]["index"], i);
        EXPECT_EQ(all["choices"][i]["text"], alone[i]) << i;
        EXPECT_TRUE(all["choices"][i]["logprobs"].is_null());
    }
    EXPECT_EQ(all["usage"]["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(all["usage"]["completion_tokens"], 15);
    const json stats = json::parse(c.Get("/slots")->body);
    for (const json& slot : stats) EXPECT_TRUE(test::slot_free(slot)) << slot;
}

TEST(HttpScoring, NChoicesOfAPromptAreItsSeedsSeedPlusJ) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, engine_options("pq:calib=16,refresh=0,window=4,sinks=2"));
    auto c = s.client();
    json body = {{"messages", {{{"role", "user"}, {"content", "Who is Mr Tilney?"}}}}, {"max_tokens", 6},
                 {"temperature", 1.0}, {"seed", 40}};
    std::vector<json> alone;
    for (int j = 0; j < 3; ++j) {
        body["seed"] = 40 + j;
        alone.push_back(post(c, "/v1/chat/completions", body)["choices"][0]["message"]["content"]);
    }
    EXPECT_FALSE(alone[0] == alone[1] && alone[1] == alone[2]) << "seeds draw different text";
    body["seed"] = 40;
    body["n"] = 3;
    const json all = post(c, "/v1/chat/completions", body);
    ASSERT_EQ(all["choices"].size(), 3u);
    for (std::size_t j = 0; j < 3; ++j) {
        EXPECT_EQ(all["choices"][j]["index"], j);
        EXPECT_EQ(all["choices"][j]["message"]["content"], alone[j]) << j;
    }
    EXPECT_EQ(all["usage"]["completion_tokens"], 18);
    body["n"] = 1;
    EXPECT_EQ(all["usage"]["prompt_tokens"], post(c, "/v1/chat/completions", body)["usage"]["prompt_tokens"])
        << "a prompt counts once, whatever n";
}

TEST(HttpScoring, SeveralChoicesAreAdmittedAllOrNone) {
    const LoadedModel& m = test::austen_serve_model();
    serve::EngineOptions o = engine_options();
    o.queue_capacity = 2;  // at most 3 requests at once (one admitted at the next step)
    o.ctx = 1024;
    test::TestServer s(m, o);
    auto c = s.client();
    json body = {{"prompt", "It was"}, {"max_tokens", 4}, {"temperature", 0}};
    body["n"] = 3;
    EXPECT_EQ(post(c, "/v1/completions", body)["choices"].size(), 3u);
    body["n"] = 4;
    EXPECT_NE(post(c, "/v1/completions", body, 400)["error"]["message"].get<std::string>().find("queue holds 2"),
              std::string::npos);
    // One prompt of three too long for the context: nothing of the request starts.
    std::string long_prompt;
    for (int i = 0; i < 1100; ++i) long_prompt += " and";
    body = {{"prompt", {"It was", long_prompt, "She"}}, {"max_tokens", 4}};
    EXPECT_NE(post(c, "/v1/completions", body, 400)["error"]["message"].get<std::string>().find("exceeds the context"),
              std::string::npos);
    // A whole response whose logprobs would hold more than 2^20 entries is refused before anything runs.
    body = {{"prompt", "It was"}, {"max_tokens", 1000}, {"logprobs", 20}, {"n", 64}};
    EXPECT_EQ(post(c, "/v1/completions", body, 400)["error"]["param"], "logprobs");
    const json stats = json::parse(c.Get("/slots")->body);
    for (const json& slot : stats) EXPECT_TRUE(test::slot_free(slot)) << slot;
    EXPECT_NE(c.Get("/metrics")->body.find("aqpim_sequences_queued 0"), std::string::npos);
}

TEST(HttpScoring, StreamedEchoSendsThePromptFirst) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, engine_options());
    auto c = s.client();
    json body = {{"prompt", "Northanger Abbey was"}, {"max_tokens", 4}, {"temperature", 0}, {"echo", true}, {"logprobs", 2}};
    const json whole = post(c, "/v1/completions", body);
    body["stream"] = true;
    auto r = test::post_json(c, "/v1/completions", body);
    ASSERT_TRUE(r && r->status == 200);
    const auto events = test::sse_data(r->body);
    ASSERT_GE(events.size(), 3u);
    const json first = json::parse(events[0]);
    const json& wlp = whole["choices"][0]["logprobs"];
    const std::size_t n_prompt = whole["usage"]["prompt_tokens"].get<std::size_t>();
    ASSERT_EQ(first["choices"][0]["logprobs"]["tokens"].size(), n_prompt);
    for (std::size_t i = 0; i < n_prompt; ++i)
        EXPECT_EQ(first["choices"][0]["logprobs"]["token_logprobs"][i], wlp["token_logprobs"][i]) << i;
    std::string text;
    for (std::size_t i = 0; i + 2 < events.size(); ++i) text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text, whole["choices"][0]["text"]);
    expect_consistent_logprobs(whole["choices"][0]);
}

TEST(HttpScoring, TokenizerEndpointsRoundTripAndRefuseNonsense) {
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, engine_options());
    auto c = s.client();
    const std::string text = "Miss Tilney's brother";
    const json t = post(c, "/tokenize", {{"prompt", text}});  // vLLM: BOS by default
    EXPECT_EQ(t["tokens"], m.tokenizer->encode(text, true));
    EXPECT_EQ(t["count"], t["tokens"].size());
    EXPECT_EQ(t["max_model_len"], 512);
    const json plain = post(c, "/tokenize", {{"content", text}});  // llama-server: none by default
    EXPECT_EQ(plain["tokens"], m.tokenizer->encode(text, false));
    EXPECT_EQ(post(c, "/detokenize", {{"tokens", plain["tokens"]}})["prompt"], text);
    EXPECT_EQ(post(c, "/detokenize", {{"tokens", plain["tokens"]}})["content"], text);

    auto info = c.Get("/tokenizer_info");
    ASSERT_TRUE(info && info->status == 200);
    const json i = json::parse(info->body);
    // lm-eval's remote tokenizer finds EOS's id by tokenizing its text.
    EXPECT_EQ(post(c, "/tokenize", {{"prompt", i["eos_token"]}, {"add_special_tokens", false}})["tokens"],
              json::array({m.tokenizer->eos()}));
    EXPECT_EQ(i["vocab_size"], m.tokenizer->n_vocab());

    EXPECT_EQ(post(c, "/detokenize", {{"tokens", {1, 1 << 20}}}, 400)["error"]["param"], "tokens[1]");
    EXPECT_EQ(post(c, "/tokenize", {{"prompt", "a"}, {"content", "b"}}, 400)["error"]["param"], "prompt");
    EXPECT_EQ(post(c, "/tokenize", {{"prompt", 3}}, 400)["error"]["param"], "prompt");
    EXPECT_EQ(post(c, "/tokenize", {{"text", "a"}}, 400)["error"]["param"], "text");
}

}  // namespace
}  // namespace aqpim
