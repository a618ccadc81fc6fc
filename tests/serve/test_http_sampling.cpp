// Sampling parameters through aqpim serve (docs/serve.md, "Sampling parameters"): logit_bias,
// the penalties, top_k and min_p reach the sampler, and the logprobs stay the model's; best_of
// returns the choices with the highest mean log probability.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;

json complete(httplib::Client& c, json body) {
    body["prompt"] = "It was a truth universally acknowledged, that";
    auto r = test::post_json(c, "/v1/completions", body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return r ? json::parse(r->body)["choices"][0] : json();
}

TEST(HttpSampling, BiasPenaltiesTopKAndMinPReachTheSampler) {
    const LoadedModel& m = test::austen_serve_model();
    serve::EngineOptions o;
    o.kv = "pq:calib=16,refresh=0,window=4,sinks=2";
    o.ctx = 256;
    o.parallel = 2;
    o.threads = 2;
    test::TestServer s(m, o);
    auto c = s.client();

    const std::int32_t forced = m.tokenizer->encode("Tilney", false).front();  // "▁T..."
    const std::int32_t last = m.tokenizer->encode("It was a truth universally acknowledged, that", true).back();
    const json biased = complete(c, {{"max_tokens", 5}, {"temperature", 0}, {"logprobs", 0},
                                     {"logit_bias", {{std::to_string(forced), 100}}}});
    double lowest = 0.0;
    for (std::size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(biased["logprobs"]["tokens"][i], m.tokenizer->piece(i == 0 ? last : forced, forced)) << i;
        lowest = std::min(lowest, biased["logprobs"]["token_logprobs"][i].get<double>());
    }
    EXPECT_LT(lowest, -1.0) << "the logprobs are the model's, not the biased distribution's";

    const json greedy = complete(c, {{"max_tokens", 24}, {"temperature", 0}});
    // At temperature 1 only the most likely token survives top_k 1 or min_p 1: the greedy text.
    EXPECT_EQ(complete(c, {{"max_tokens", 24}, {"temperature", 1}, {"seed", 9}, {"top_k", 1}})["text"], greedy["text"]);
    EXPECT_EQ(complete(c, {{"max_tokens", 24}, {"temperature", 1}, {"seed", 9}, {"min_p", 1}})["text"], greedy["text"]);
    EXPECT_NE(complete(c, {{"max_tokens", 24}, {"temperature", 1}, {"seed", 9}})["text"], greedy["text"]);

    // The greedy text repeats a token; penalising repeats changes it.
    const json g = complete(c, {{"max_tokens", 24}, {"temperature", 0}, {"logprobs", 0}});
    std::map<std::string, int> counts;
    for (const json& t : g["logprobs"]["tokens"]) ++counts[t.get<std::string>()];
    int most = 0;
    for (const auto& [t, n] : counts) most = std::max(most, n);
    ASSERT_GT(most, 1) << g["text"];
    for (const json& extra : {json{{"frequency_penalty", 2}}, json{{"presence_penalty", 2}}, json{{"repeat_penalty", 3}},
                              json{{"repetition_penalty", 3}}}) {
        json body = {{"max_tokens", 24}, {"temperature", 0}};
        body.update(extra);
        EXPECT_NE(complete(c, body)["text"], greedy["text"]) << extra.dump();
    }
}

TEST(HttpSampling, BestOfReturnsTheChoicesWithTheHighestMeanLogprob) {
    // best_of = 4 generates the four choices n = 4 would (seeds seed .. seed + 3, tokens independent
    // of the batch) and returns the n of them with the highest mean log probability per token.
    const LoadedModel& m = test::austen_serve_model();
    test::TestServer s(m, test::small_engine("pq:calib=16,refresh=0,window=4,sinks=2"));
    auto c = s.client();
    const json base = {{"prompt", {"It was a truth", "Catherine"}}, {"max_tokens", 12}, {"temperature", 1.2}, {"seed", 21}};
    json all_body = base;
    all_body["n"] = 4;
    all_body["logprobs"] = 0;
    const json all = test::post(c, "/v1/completions", all_body);
    ASSERT_EQ(all["choices"].size(), 8u);
    for (const int n : {1, 2}) {
        json body = base;
        body["n"] = n;
        body["best_of"] = 4;
        const json r = test::post(c, "/v1/completions", body);
        ASSERT_EQ(r["choices"].size(), std::size_t(2 * n));
        for (int prompt = 0; prompt < 2; ++prompt) {
            std::vector<std::pair<double, std::string>> ranked;  // (-mean logprob, text), best first
            for (int j = 0; j < 4; ++j) {
                const json& ch = all["choices"][std::size_t(prompt * 4 + j)];
                double sum = 0;
                for (const json& lp : ch["logprobs"]["token_logprobs"]) sum += lp.get<double>();
                ranked.push_back({-sum / double(ch["logprobs"]["token_logprobs"].size()), ch["text"]});
            }
            std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
            ASSERT_NE(ranked[0].first, ranked[3].first) << "the four choices differ";
            for (int j = 0; j < n; ++j) {
                const json& ch = r["choices"][std::size_t(prompt * n + j)];
                EXPECT_EQ(ch["index"], prompt * n + j);
                EXPECT_EQ(ch["text"], ranked[std::size_t(j)].second) << "prompt " << prompt << " rank " << j;
            }
        }
        EXPECT_EQ(r["usage"]["completion_tokens"], all["usage"]["completion_tokens"]) << "every sequence generated counts";
        EXPECT_EQ(r["usage"]["prompt_tokens"], all["usage"]["prompt_tokens"]);
    }
    // A choice that generated no text (here a stop string " " cut its first token) ranks last, not
    // first (an empty mean would be 0, above every real one): the first seed whose four choices
    // mix empty and non-empty texts.
    bool mixed = false;
    for (int seed = 1; seed <= 40 && !mixed; ++seed) {
        json four = {{"prompt", "It was"}, {"max_tokens", 6}, {"temperature", 1.5}, {"seed", seed}, {"stop", {" "}}, {"n", 4}};
        const json all4 = test::post(c, "/v1/completions", four);
        int empty = 0;
        for (const json& ch : all4["choices"]) empty += ch["text"] == "";
        if (empty == 0 || empty == 4) continue;
        mixed = true;
        four.erase("n");
        four["best_of"] = 4;
        four["n"] = 3;
        const json best = test::post(c, "/v1/completions", four);
        for (int j = 0; j < 4 - empty && j < 3; ++j)
            EXPECT_NE(best["choices"][std::size_t(j)]["text"], "") << "seed " << seed << ": choice " << j << " of " << best.dump();
    }
    EXPECT_TRUE(mixed) << "some seed gives empty and non-empty choices";
    json bad = base;
    bad["n"] = 3;
    bad["best_of"] = 2;
    EXPECT_EQ(test::post(c, "/v1/completions", bad, 400)["error"]["param"], "best_of");
    bad["n"] = 1;
    bad["stream"] = true;
    EXPECT_EQ(test::post(c, "/v1/completions", bad, 400)["error"]["param"], "best_of");
    bad["stream"] = false;
    bad["best_of"] = 33;  // 2 prompts x 33 > 64 choices
    EXPECT_EQ(test::post(c, "/v1/completions", bad, 400)["error"]["param"], "best_of");
}

}  // namespace
}  // namespace aqpim
