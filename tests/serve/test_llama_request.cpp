// llama-server's own request format (src/serve/llama_request.h), the infill prompt it builds
// (infill.h) and the text limits of its /infill (TextStream's indentation, the stop string).

#include <gtest/gtest.h>

#include "serve/byte_vocab.h"
#include "serve/infill.h"
#include "serve/llama_request.h"
#include "serve/text_stream.h"
#include "support/errors.h"

namespace aqpim {
namespace {

using nlohmann::json;
using serve::ApiError;
using serve::LlamaCompletionParams;

serve::RequestLimits limits() {
    serve::RequestLimits l;
    l.n_vocab = 300;
    return l;
}

LlamaCompletionParams parse(const json& body, bool infill = false) {
    // A text's "tokens" here: one per byte, the byte's value (enough to see which were read).
    const serve::TokenizeFn tokenize = [](const std::string& t) { return std::vector<std::int32_t>(t.begin(), t.end()); };
    return serve::parse_llama_completion_request(body, infill, limits(), tokenize);
}

/// The 400 a body gets: its param and message.
std::pair<std::string, std::string> refusal(const json& body, bool infill = false) {
    try {
        parse(body, infill);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        return {e.param(), e.what()};
    }
    ADD_FAILURE() << "accepted: " << body.dump();
    return {};
}

TEST(LlamaRequest, DefaultsAreLlamaServersInItsOrder) {
    const LlamaCompletionParams lp = parse({{"prompt", "hi"}});
    const serve::CompletionParams& p = lp.params;
    EXPECT_FLOAT_EQ(p.temperature, 0.8f);
    EXPECT_EQ(p.top_p, 1.0f) << "the sampler's nucleus is off: the processing takes it at temperature 1";
    EXPECT_TRUE(p.processing.unit_temperature);
    EXPECT_EQ(p.processing.top_k, 40);
    EXPECT_FLOAT_EQ(p.processing.top_p, 0.95f);
    EXPECT_FLOAT_EQ(p.processing.min_p, 0.05f);
    EXPECT_EQ(p.processing.repetition_penalty, 1.0f);
    EXPECT_EQ(p.processing.repetition_window, 64);
    EXPECT_FALSE(p.max_tokens);
    EXPECT_EQ(p.default_length, serve::CompletionParams::DefaultLength::server);
    EXPECT_FALSE(p.seed);
    EXPECT_EQ(p.processing.invalid_reason(300), "");
    ASSERT_EQ(lp.prompts.size(), 1u);
    EXPECT_EQ(lp.prompts[0][0].text, "hi");
    EXPECT_EQ(lp.settings["top_k"], 40);
}

TEST(LlamaRequest, ReadsItsFieldsAndPromptShapes) {
    LlamaCompletionParams lp = parse({{"prompt", {12, 34, "mid", 56}}, {"n_predict", 7}, {"temperature", -1}, {"seed", 9},
                                      {"stop", {"\n\n"}}, {"n_probs", 3}, {"stream", true}, {"top_k", -5}, {"top_p", 0},
                                      {"repeat_last_n", 16}, {"logit_bias", {{5, false}, {"ab", 2.5}, {7, -1}}},
                                      {"return_tokens", true}, {"response_fields", {"content", "timings/prompt_n"}},
                                      {"n_indent", 4}, {"t_max_predict_ms", 250}, {"ignore_eos", true},
                                      {"cache_prompt", false}, {"n_keep", -1}, {"typical_p", 1}, {"mirostat", 0},
                                      {"dry_multiplier", 0}, {"xtc_probability", 0}, {"min_keep", 0}, {"lora", json::array()}});
    const serve::CompletionParams& p = lp.params;
    ASSERT_EQ(lp.prompts.size(), 1u) << "numbers and strings mixed: one prompt";
    ASSERT_EQ(lp.prompts[0].size(), 3u);
    EXPECT_EQ(lp.prompts[0][0].tokens, (std::vector<std::int32_t>{12, 34}));
    EXPECT_EQ(lp.prompts[0][1].text, "mid");
    EXPECT_EQ(lp.prompts[0][2].tokens, (std::vector<std::int32_t>{56}));
    EXPECT_EQ(p.max_tokens, 7);
    EXPECT_EQ(p.temperature, 0.0f) << "a negative temperature is greedy";
    EXPECT_EQ(p.seed, 9u);
    EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n"}));
    EXPECT_TRUE(p.logprobs);
    EXPECT_EQ(p.top_logprobs, 3);
    EXPECT_TRUE(p.stream);
    EXPECT_EQ(p.processing.top_k, 0) << "top_k <= 0: all";
    EXPECT_EQ(p.processing.top_p, 0.0f);
    EXPECT_EQ(p.processing.repetition_window, 16) << "repeat_last_n needs no repeat_penalty here";
    EXPECT_EQ(p.processing.banned, (std::vector<std::int32_t>{5}));
    EXPECT_EQ(p.processing.logit_bias,
              (std::vector<std::pair<std::int32_t, float>>{{'a', 2.5f}, {'b', 2.5f}, {7, -1.0f}}))
        << "a text biases each of its tokens";
    EXPECT_TRUE(lp.return_tokens);
    EXPECT_EQ(lp.response_fields, (std::vector<std::string>{"content", "timings/prompt_n"}));
    EXPECT_EQ(lp.min_indent, 4);
    EXPECT_EQ(lp.max_predict.count(), 250);
    EXPECT_TRUE(lp.ignore_eos);

    // Several prompts: strings, or arrays of ids and strings.
    lp = parse({{"prompt", {"a", "b"}}});
    EXPECT_EQ(lp.prompts.size(), 2u);
    lp = parse({{"prompt", json::array({json::array({1, 2}), "c", json::array({3, "d"})})}});
    ASSERT_EQ(lp.prompts.size(), 3u);
    EXPECT_EQ(lp.prompts[2].size(), 2u);
    lp = parse({{"prompt", {json::array({1, 2})}}});
    EXPECT_EQ(lp.prompts.size(), 1u);
    EXPECT_EQ(lp.prompts[0][0].tokens, (std::vector<std::int32_t>{1, 2}));
    // -1: as many as the context holds; -1 and 4294967295 seeds are drawn.
    lp = parse({{"prompt", "x"}, {"n_predict", -1}, {"seed", 4294967295LL}});
    EXPECT_EQ(lp.params.default_length, serve::CompletionParams::DefaultLength::context);
    EXPECT_FALSE(lp.params.seed);
    EXPECT_FALSE(parse({{"prompt", "x"}, {"seed", -1}}).params.seed);
    EXPECT_EQ(parse({{"prompt", "x"}, {"max_tokens", 3}}).params.max_tokens, 3) << "max_tokens when n_predict is absent";
}

TEST(LlamaRequest, SamplersListTurnsTheOthersOff) {
    LlamaCompletionParams lp = parse({{"prompt", "x"}, {"samplers", {"top_k", "temperature"}}});
    EXPECT_EQ(lp.params.processing.top_k, 40);
    EXPECT_EQ(lp.params.processing.top_p, 1.0f);
    EXPECT_EQ(lp.params.processing.min_p, 0.0f);
    EXPECT_FLOAT_EQ(lp.params.temperature, 0.8f);
    lp = parse({{"prompt", "x"}, {"samplers", "kp"}, {"temperature", 0.2}, {"repeat_penalty", 1.3}});
    EXPECT_EQ(lp.params.processing.top_k, 40);
    EXPECT_FLOAT_EQ(lp.params.processing.top_p, 0.95f);
    EXPECT_EQ(lp.params.processing.min_p, 0.0f);
    EXPECT_EQ(lp.params.temperature, 1.0f) << "without the temperature sampler the draw is at the logits' scale";
    EXPECT_EQ(lp.params.processing.repetition_penalty, 1.0f) << "without penalties, no repeat_penalty";
    lp = parse({{"prompt", "x"}, {"samplers", {"penalties", "top-k", "nucleus", "min-p", "temp"}}, {"repeat_penalty", 1.3}});
    EXPECT_FLOAT_EQ(lp.params.processing.repetition_penalty, 1.3f);
    EXPECT_FLOAT_EQ(lp.params.processing.min_p, 0.05f);

    EXPECT_NE(refusal({{"prompt", "x"}, {"samplers", {"top_p", "top_k"}}}).second.find("out of order"), std::string::npos);
    lp = parse({{"prompt", "x"}, {"samplers", {"top_k", "top_p", "infill"}}});  // llama.vim's
    EXPECT_TRUE(lp.infill_sampler);
    EXPECT_EQ(lp.params.processing.min_p, 0.0f);
    EXPECT_EQ(lp.settings["samplers"], json({"top_k", "top_p", "infill"}));
    EXPECT_FALSE(parse({{"prompt", "x"}}).infill_sampler);
    EXPECT_NE(refusal({{"prompt", "x"}, {"samplers", {"top_k", "temperature", "infill"}}}).second.find("out of order"), std::string::npos);
    EXPECT_NE(refusal({{"prompt", "x"}, {"samplers", {"warp"}}}).second.find("unknown sampler"), std::string::npos);
    EXPECT_EQ(refusal({{"prompt", "x"}, {"samplers", 3}}).first, "samplers");
}

TEST(LlamaRequest, NamesWhatIsWrong) {
    const std::vector<std::pair<json, std::string>> cases = {
        {{{"n_predict", 4}}, "prompt"},
        {{{"prompt", "x"}, {"n_predict", 0}}, "n_predict"},
        {{{"prompt", "x"}, {"n_predict", -2}}, "n_predict"},
        {{{"prompt", "x"}, {"temperature", "hot"}}, "temperature"},
        {{{"prompt", "x"}, {"top_p", 1.5}}, "top_p"},
        {{{"prompt", "x"}, {"min_p", -0.1}}, "min_p"},
        {{{"prompt", {1, 300}}}, "prompt[1]"},
        {{{"prompt", "x"}, {"n_probs", 21}}, "n_probs"},
        {{{"prompt", "x"}, {"stop", 5}}, "stop"},
        {{{"prompt", "x"}, {"stop", {""}}}, "stop[0]"},
        {json::parse(R"({"prompt": "x", "logit_bias": [[5]]})"), "logit_bias[0]"},
        {json::parse(R"({"prompt": "x", "logit_bias": [[5, 200]]})"), "logit_bias[0][1]"},
        {json::parse(R"({"prompt": "x", "logit_bias": [[5, 1], [5, 2]]})"), "logit_bias[1]"},
        {json::parse(R"({"prompt": "x", "logit_bias": [["", 1]]})"), "logit_bias[0][0]"},
        {json::parse(R"({"prompt": "x", "logit_bias": {"5": true}})"), "logit_bias.5"},
        {{{"prompt", "x"}, {"mirostat", 2}}, "mirostat"},
        {{{"prompt", "x"}, {"typical_p", 0.5}}, "typical_p"},
        {{{"prompt", "x"}, {"dry_multiplier", 0.8}}, "dry_multiplier"},
        {{{"prompt", "x"}, {"xtc_probability", 0.5}}, "xtc_probability"},
        {{{"prompt", "x"}, {"dynatemp_range", 0.5}}, "dynatemp_range"},
        {{{"prompt", "x"}, {"min_keep", 5}}, "min_keep"},
        {{{"prompt", "x"}, {"post_sampling_probs", true}}, "post_sampling_probs"},
        {{{"prompt", "x"}, {"id_slot", 2}}, "id_slot"},
        {{{"prompt", "x"}, {"lora", {{{"id", 0}, {"scale", 1}}}}}, "lora"},
        {{{"prompt", "x"}, {"n_indent", -1}}, "n_indent"},
        {{{"prompt", "x"}, {"response_fields", "content"}}, "response_fields"},
        {{{"prompt", "x"}, {"dry_sequence_breakers", json::array()}}, "dry_sequence_breakers"},
        {{{"prompt", "x"}, {"max_tokens_typo", 1}}, "max_tokens_typo"},
        {{{"prompt", "x"}, {"input_prefix", "a"}}, "input_prefix"},  // /infill's only
        {{{"prompt", "x"}, {"grammar", "root ::= ("}}, "grammar"},
    };
    for (const auto& [body, param] : cases) EXPECT_EQ(refusal(body).first, param) << body.dump();
    // The messages say what to give.
    EXPECT_NE(refusal({{"prompt", "x"}, {"mirostat", 2}}).second.find("give 0"), std::string::npos);
    EXPECT_NE(refusal({{"prompt", "x"}, {"n_predict", 0}}).second.find("at least one"), std::string::npos);
}

TEST(LlamaRequest, InfillReadsPrefixSuffixAndFiles) {
    const LlamaCompletionParams lp = parse({{"input_prefix", "def f():\n    "}, {"input_suffix", "\n"},
                                            {"input_extra", {{{"filename", "a.py"}, {"text", "x = 1"}}, {{"text", "y"}}}},
                                            {"prompt", "re"}, {"n_indent", 4}},
                                           true);
    EXPECT_EQ(lp.input_prefix, "def f():\n    ");
    EXPECT_EQ(lp.input_suffix, "\n");
    ASSERT_EQ(lp.input_extra.size(), 2u);
    EXPECT_EQ(lp.input_extra[0].filename, "a.py");
    EXPECT_EQ(lp.input_extra[1].filename, "tmp") << "llama-server's name for a file without one";
    ASSERT_EQ(lp.prompts.size(), 1u);
    EXPECT_EQ(lp.prompts[0][0].text, "re");
    EXPECT_TRUE(parse({{"input_prefix", ""}, {"input_suffix", ""}}, true).prompts.empty());

    EXPECT_EQ(refusal({{"input_suffix", ""}}, true).first, "input_prefix");
    EXPECT_EQ(refusal({{"input_prefix", ""}}, true).first, "input_suffix");
    EXPECT_EQ(refusal({{"input_prefix", {1, 2}}, {"input_suffix", ""}}, true).first, "input_prefix");
    EXPECT_EQ(refusal({{"input_prefix", ""}, {"input_suffix", ""}, {"input_extra", {{{"text", 3}}}}}, true).first,
              "input_extra[0].text");
    EXPECT_EQ(refusal({{"input_prefix", ""}, {"input_suffix", ""}, {"input_extra", {{{"txt", "a"}}}}}, true).first,
              "input_extra[0].txt");
    EXPECT_EQ(refusal({{"input_prefix", ""}, {"input_suffix", ""}, {"prompt", {1}}}, true).first, "prompt");
}

TEST(Infill, FilesAndTheFitToTheContext) {
    using test::kAb;
    using test::kC;
    using test::kHello;
    using test::kLd;
    using test::kWor;
    // Qwen2.5-Coder's tokens with its repository tokens: 265.. prefix suffix middle repo sep.
    const VocabData v = test::byte_vocab({"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"});
    const auto fim = serve::find_fim_tokens(v);
    ASSERT_TRUE(fim);
    EXPECT_EQ(fim->repo, 268);
    EXPECT_EQ(fim->file_sep, 269);
    const auto t = Tokenizer::create(v);
    const auto enc = [&](const std::string& s) { return t->encode(s, false); };
    auto cat = [](std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    // <repo>myproject\n <sep>a.py\n TEXT <sep>filename\n
    const std::vector<std::int32_t> extra = serve::infill_extra_tokens(*t, *fim, {{"a.py", "ab"}});
    std::vector<std::int32_t> want = cat(cat({268}, enc("myproject\n")), cat(cat({269}, enc("a.py\n")), enc("ab")));
    want = cat(cat(want, {269}), enc("filename\n"));
    EXPECT_EQ(extra, want);
    // Without repository tokens: each file after a snippet line.
    const auto plain = Tokenizer::create(test::byte_vocab({"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"}));
    const auto plain_fim = serve::find_fim_tokens(plain->vocab());
    EXPECT_EQ(plain_fim->repo, -1);
    EXPECT_EQ(serve::infill_extra_tokens(*plain, *plain_fim, {{"a.py", "ab"}}), cat(plain->encode("\n\n--- snippet ---\n\n", false), enc("ab")));

    // The whole prompt when it fits: BOS extra PRE prefix prompt SUF suffix MID.
    const serve::InfillParts parts{{7, 8, 9}, {kHello, kWor, kLd, kAb}, {kC}, {kLd, kAb, kC, kWor}};
    const std::vector<std::int32_t> whole = {1, 7, 8, 9, 265, kHello, kWor, kLd, kAb, kC, 266, kLd, kAb, kC, kWor, 267};
    EXPECT_EQ(serve::infill_prompt(*t, *fim, parts, 100), whole);
    EXPECT_EQ(serve::infill_prompt(*t, *fim, parts, whole.size()), whole);
    // Fixed: BOS, three FIM tokens, the prompt = 5; 13 leaves 8 for prefix 4 + suffix 4, no extra.
    EXPECT_EQ(serve::infill_prompt(*t, *fim, parts, 13),
              (std::vector<std::int32_t>{1, 265, kHello, kWor, kLd, kAb, kC, 266, kLd, kAb, kC, kWor, 267}));
    // 9 leaves 4: the prefix's last 3 (3/4) and the suffix's first 1.
    EXPECT_EQ(serve::infill_prompt(*t, *fim, parts, 9), (std::vector<std::int32_t>{1, 265, kWor, kLd, kAb, kC, 266, kLd, 267}));
    // A short suffix leaves its share to the prefix: 4 left, suffix 1 long.
    const serve::InfillParts short_suffix{{}, {kHello, kWor, kLd, kAb}, {}, {kC}};
    EXPECT_EQ(serve::infill_prompt(*t, *fim, short_suffix, 8), (std::vector<std::int32_t>{1, 265, kWor, kLd, kAb, 266, kC, 267}));
    // Less than the fixed tokens: those alone (admission then refuses what cannot fit).
    EXPECT_EQ(serve::infill_prompt(*t, *fim, parts, 2), (std::vector<std::int32_t>{1, 265, kC, 266, 267}));
}

TEST(TextStream, AnUnderIndentedLineEndsTheTextBeforeItsFirstCharacter) {
    const auto bytes = [](serve::TextStream& s, const std::string& text) {
        std::string out;
        for (const char c : text) out += s.push(test::ev(test::byte_id(static_cast<unsigned char>(c)))).text;
        return out + s.flush().text;
    };
    {
        serve::TextStream s(test::byte_tokenizer(), {}, test::kHello);
        s.set_min_indent(4);
        // The first line continues the prefix's: not checked. "  z" has 2 < 4: cut before "z".
        EXPECT_EQ(bytes(s, "x = 1\n    y = 2\n    \n  z = 3\n"), "x = 1\n    y = 2\n    \n  ");
        EXPECT_TRUE(s.stopped());
        EXPECT_TRUE(s.stopped_by_indent());
        EXPECT_EQ(s.stop_word(), "");
    }
    {
        serve::TextStream s(test::byte_tokenizer(), {}, test::kHello);
        s.set_min_indent(2);
        EXPECT_EQ(bytes(s, "a\n\t b\n  c\n \td"), "a\n\t b\n  c\n \td") << "a tab counts one";
        EXPECT_FALSE(s.stopped());
    }
    {
        serve::TextStream s(test::byte_tokenizer(), {}, test::kHello);
        s.set_min_indent(4);
        EXPECT_EQ(bytes(s, "x\n    y\n\n    z"), "x\n    y\n") << "a blank line is under-indented (llama-server)";
        EXPECT_TRUE(s.stopped_by_indent());
    }
    {
        serve::TextStream s(test::byte_tokenizer(), {"STOP"}, test::kHello);
        s.set_min_indent(4);
        EXPECT_EQ(bytes(s, "a\n    bSTOP\nc"), "a\n    b") << "the stop string comes first";
        EXPECT_EQ(s.stop_word(), "STOP");
        EXPECT_FALSE(s.stopped_by_indent());
    }
}

}  // namespace
}  // namespace aqpim
