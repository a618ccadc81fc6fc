// Fill in the middle over HTTP (/v1/completions with `suffix`, docs/serve.md "Fill in the middle"):
// a model with FIM tokens gets the prefix-suffix-middle prompt; one without them, echo beside a
// suffix, and a suffix continuing a parked sequence are refused naming `suffix`.

#include <gtest/gtest.h>

#include "serve/http_test_util.h"

namespace aqpim {
namespace {

using nlohmann::json;

TEST(HttpInfill, ASuffixMakesTheFillInTheMiddlePrompt) {
    const LoadedModel m = test::fim_serve_model();
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const std::string prefix = "def add(a, b):\n    ", suffix = "\n    return c\n";
    const json done = test::post(c, "/v1/completions", {{"prompt", prefix}, {"suffix", suffix}, {"max_tokens", 8}, {"seed", 1}});
    // [BOS] <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>
    const std::size_t want = (m.tokenizer->vocab().add_bos ? 1 : 0) + 3 + m.tokenizer->encode(prefix, false).size() +
                             m.tokenizer->encode(suffix, false).size();
    EXPECT_EQ(done["usage"]["prompt_tokens"], want);
    EXPECT_EQ(done["usage"]["completion_tokens"], 8);
    // Token-id prompts are prefixes too; an empty suffix is a plain completion.
    const json ids = test::post(c, "/v1/completions", {{"prompt", {5, 6, 7}}, {"suffix", "x"}, {"max_tokens", 1}});
    EXPECT_EQ(ids["usage"]["prompt_tokens"], (m.tokenizer->vocab().add_bos ? 1 : 0) + 3 + 3 + m.tokenizer->encode("x", false).size());
    const json plain = test::post(c, "/v1/completions", {{"prompt", prefix}, {"suffix", ""}, {"max_tokens", 1}});
    EXPECT_EQ(plain["usage"]["prompt_tokens"], m.tokenizer->encode(prefix, true).size());
    // Refused, naming suffix.
    for (const json& body : {json{{"prompt", prefix}, {"suffix", suffix}, {"echo", true}},
                             json{{"prompt", prefix}, {"suffix", suffix}, {"keep_slot", true}},
                             json{{"prompt", prefix}, {"suffix", 7}}}) {
        const json e = test::post(c, "/v1/completions", body, 400);
        EXPECT_EQ(e["error"]["param"], "suffix") << body.dump();
    }
}

TEST(HttpInfill, AModelWithoutFimTokensRefusesASuffix) {
    test::TestServer s(test::synth_serve_model(), test::small_engine());
    auto c = s.client();
    const json e = test::post(c, "/v1/completions", {{"prompt", "x"}, {"suffix", "y"}}, 400);
    EXPECT_EQ(e["error"]["param"], "suffix");
    EXPECT_NE(e["error"]["message"].get<std::string>().find("no fill-in-the-middle tokens"), std::string::npos);
}

}  // namespace
}  // namespace aqpim
