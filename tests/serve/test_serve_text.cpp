// The server's pure parts: chat templates, text release with stop strings and UTF-8, request
// parsing, Prometheus text (issue 19).

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>

#include "serve/chat_template.h"
#include "serve/infill.h"
#include "serve/openai_request.h"
#include "serve/prometheus.h"
#include "serve/text_stream.h"
#include "serve/byte_vocab.h"
#include "support/errors.h"

namespace aqpim {
namespace {

using nlohmann::json;
using serve::ChatFormat;
using test::byte_id;
using test::byte_tokenizer;
using test::byte_vocab;
using test::ev;
using test::kAb;
using test::kC;
using test::kEnd;
using test::kHello;
using test::kLd;
using test::kWor;

void expect_error_contains(const std::function<void()>& f, const std::string& fragment) {
    const std::string e = test::error_of(f);
    EXPECT_NE(e.find(fragment), std::string::npos) << "'" << fragment << "' not in error '" << e << "'";
    EXPECT_FALSE(e.empty());
}

TEST(ChatTemplate, RecognisesTheCommonTemplatesByTheirMarkers) {
    EXPECT_EQ(serve::detect_chat_format("{% for m in messages %}<|im_start|>{{ m.role }}\n"), ChatFormat::chatml);
    EXPECT_EQ(serve::detect_chat_format("{{ '<|start_header_id|>' + message['role'] }}"), ChatFormat::llama3);
    EXPECT_EQ(serve::detect_chat_format("{{ bos_token + '[INST] <<SYS>>\\n' }}"), ChatFormat::llama2);
    EXPECT_EQ(serve::detect_chat_format("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), ChatFormat::mistral);
    EXPECT_EQ(serve::detect_chat_format("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim }}"), ChatFormat::gemma);
    EXPECT_EQ(serve::detect_chat_format("{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n'}}"), ChatFormat::phi3);
    EXPECT_EQ(serve::detect_chat_format("{{ '<|user|>\\n' + message['content'] + eos_token }}"), ChatFormat::plain)
        << "zephyr's turns end with EOS, not <|end|>";
    EXPECT_EQ(serve::detect_chat_format("{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}}"), ChatFormat::phi4)
        << "Phi-4's ChatML has no newline after the role";
    EXPECT_EQ(serve::detect_chat_format("{{'<\uFF5CUser\uFF5C>' + message['content']}}"), ChatFormat::deepseek);
    EXPECT_EQ(serve::detect_chat_format(""), ChatFormat::plain);
    EXPECT_EQ(serve::detect_chat_format("{{ something else }}"), ChatFormat::plain);
    EXPECT_EQ(serve::parse_chat_format("llama3"), ChatFormat::llama3);
    expect_error_contains([] { serve::parse_chat_format("jinja"); }, "chatml");
}

TEST(ChatTemplate, RendersEachFormatAsItsModelsExpect) {
    const std::vector<serve::ChatMessage> conv = {
        {"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};
    const serve::ChatTokens t{"<s>", "</s>"};
    EXPECT_EQ(serve::render_chat(ChatFormat::chatml, conv, t),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
              "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(serve::render_chat(ChatFormat::llama3, conv, t),
              "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU1"
              "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|><|start_header_id|>user"
              "<|end_header_id|>\n\nU2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    EXPECT_EQ(serve::render_chat(ChatFormat::llama2, conv, t),
              "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
    EXPECT_EQ(serve::render_chat(ChatFormat::mistral, conv, t), "[INST] S\n\nU1 [/INST]A1</s>[INST] U2 [/INST]");
    EXPECT_EQ(serve::render_chat(ChatFormat::plain, conv, t), "S\n\nUser: U1\nAssistant: A1\nUser: U2\nAssistant:");
    // A reply as the model generated it after "Assistant:" (a leading space) is sent back unchanged.
    const std::vector<serve::ChatMessage> generated = {{"user", "U1"}, {"assistant", " A1"}, {"user", "U2"}};
    EXPECT_EQ(serve::render_chat(ChatFormat::plain, generated, t), "User: U1\nAssistant: A1\nUser: U2\nAssistant:");
    // Gemma 3's template: the system text opens the first user turn, each turn's text trimmed.
    const std::vector<serve::ChatMessage> spaced = {{"system", "S"}, {"user", " U1\n"}, {"assistant", "A1 "}, {"user", "U2"}};
    EXPECT_EQ(serve::render_chat(ChatFormat::gemma, spaced, t),
              "<start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
              "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_EQ(serve::render_chat(ChatFormat::phi3, conv, t),
              "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n<|user|>\nU2<|end|>\n<|assistant|>\n");
    EXPECT_EQ(serve::render_chat(ChatFormat::phi4, conv, t),
              "<|im_start|>system<|im_sep|>S<|im_end|><|im_start|>user<|im_sep|>U1<|im_end|><|im_start|>assistant<|im_sep|>A1<|im_end|>"
              "<|im_start|>user<|im_sep|>U2<|im_end|><|im_start|>assistant<|im_sep|>");
    // DeepSeek-R1: an earlier answer's reasoning is left out of the prompt.
    const serve::ChatTokens r1{"<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>"};
    const std::vector<serve::ChatMessage> reasoned = {{"system", "S"}, {"user", "U1"}, {"assistant", "<think>\nhm\n</think>\n\nA1"}, {"user", "U2"}};
    EXPECT_EQ(serve::render_chat(ChatFormat::deepseek, reasoned, r1),
              "S<\uFF5CUser\uFF5C>U1<\uFF5CAssistant\uFF5C>\n\nA1<\uFF5Cend\u2581of\u2581sentence\uFF5C><\uFF5CUser\uFF5C>U2<\uFF5CAssistant\uFF5C>");
    EXPECT_EQ(serve::chat_stop_strings(ChatFormat::deepseek, r1), std::vector<std::string>{r1.eos});
    EXPECT_EQ(serve::chat_stop_strings(ChatFormat::phi4, t), std::vector<std::string>{"<|im_end|>"});
    EXPECT_EQ(serve::chat_stop_strings(ChatFormat::gemma, t), std::vector<std::string>{"<end_of_turn>"});
    EXPECT_EQ(serve::chat_stop_strings(ChatFormat::phi3, t), std::vector<std::string>{"<|end|>"});
    EXPECT_EQ(serve::chat_stop_strings(ChatFormat::chatml, t), std::vector<std::string>{"<|im_end|>"});
    EXPECT_EQ(serve::chat_stop_strings(ChatFormat::llama2, t), std::vector<std::string>{"</s>"});
}

TEST(ChatTemplate, RefusesConversationsTheFormatCannotHold) {
    const serve::ChatTokens t{"<s>", "</s>"};
    expect_error_contains([&] { serve::render_chat(ChatFormat::chatml, {{"wizard", "x"}}, t); }, "messages[0].role");
    expect_error_contains([&] { serve::render_chat(ChatFormat::chatml, {{"user", "x"}, {"system", "y"}}, t); },
                                "must come first");
    expect_error_contains([&] { serve::render_chat(ChatFormat::llama2, {{"user", "x"}, {"user", "y"}}, t); },
                                "alternates");
    expect_error_contains([&] { serve::render_chat(ChatFormat::mistral, {{"user", "x"}, {"assistant", "y"}}, t); },
                                "last message");
    expect_error_contains([&] { serve::render_chat(ChatFormat::plain, {}, t); }, "at least one");
    expect_error_contains([&] { serve::render_chat(ChatFormat::gemma, {{"assistant", "x"}, {"user", "y"}}, t); }, "alternates");
}

TEST(TextStream, ReleasesTextAndTokensAsTheyComplete) {
    serve::TextStream s(byte_tokenizer(), {}, 1);
    serve::TextDelta d = s.push(ev(kHello));
    EXPECT_EQ(d.text, "hello");  // leading space dropped after BOS
    ASSERT_EQ(d.tokens.size(), 1u);
    EXPECT_EQ(d.tokens[0].token, kHello);
    EXPECT_EQ(s.push(ev(kWor)).text, " wor");
    // "é" = C3 A9 in two byte tokens: nothing until the character is complete.
    d = s.push(ev(byte_id(0xC3)));
    EXPECT_TRUE(d.text.empty());
    EXPECT_TRUE(d.tokens.empty());
    d = s.push(ev(byte_id(0xA9)));
    EXPECT_EQ(d.text, "\xc3\xa9");
    EXPECT_EQ(d.tokens.size(), 2u);
    EXPECT_TRUE(s.flush().empty());
}

TEST(TextStream, StopStringAcrossTokensIsCutAndNeverSent) {
    serve::TextStream s(byte_tokenizer(), {"abc", "zzz"}, kHello);
    EXPECT_EQ(s.push(ev(kLd)).text, "ld");
    serve::TextDelta d = s.push(ev(kAb));  // "ab" may start "abc": held
    EXPECT_TRUE(d.text.empty());
    d = s.push(ev(kC));
    EXPECT_TRUE(s.stopped());
    EXPECT_TRUE(d.text.empty());
    EXPECT_TRUE(s.push(ev(kLd)).empty());
    EXPECT_TRUE(s.flush().empty());
}

TEST(TextStream, StopInsideATokenKeepsTheTextBeforeIt) {
    serve::TextStream s(byte_tokenizer(), {"bc"}, kHello);
    serve::TextDelta d = s.push(ev(kAb));  // "ab": "b" may start "bc", "a" is released
    EXPECT_EQ(d.text, "a");
    EXPECT_TRUE(d.tokens.empty());
    d = s.push(ev(kC));
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(d.text, "");
    ASSERT_EQ(d.tokens.size(), 1u);  // "ab" cut to "a": it contributed text before the stop
    EXPECT_EQ(d.tokens[0].text, "a");
}

TEST(TextStream, HeldTextThatDoesNotBecomeAStopIsReleased) {
    serve::TextStream s(byte_tokenizer(), {"abc"}, kHello);
    EXPECT_TRUE(s.push(ev(kAb)).text.empty());
    EXPECT_EQ(s.push(ev(kLd)).text, "abld");
    EXPECT_EQ(s.push(ev(kAb)).text, "");
    EXPECT_EQ(s.flush().text, "ab");
    EXPECT_FALSE(s.stopped());
    EXPECT_EQ(serve::incomplete_utf8_tail("a\xe2\x96"), 2u);
    EXPECT_EQ(serve::incomplete_utf8_tail("a\xe2\x96\x81"), 0u);
    EXPECT_EQ(serve::incomplete_utf8_tail("\xf0"), 1u);
    EXPECT_EQ(serve::valid_utf8("a\xbb\xc3\xa9\xe2\x96"), "a\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd");
    std::string five_replacements;
    for (int i = 0; i < 5; ++i) five_replacements += "\xef\xbf\xbd";
    EXPECT_EQ(serve::valid_utf8("\xc0\x80\xed\xa0\x80"), five_replacements);  // an overlong form, a surrogate
    (void)kEnd;
}

serve::RequestLimits limits() {
    serve::RequestLimits l;
    l.n_vocab = 100;
    return l;
}

TEST(Infill, TheFimTokensMakeAPrefixSuffixMiddlePrompt) {
    // Qwen2.5-Coder's tokens, with its padding and file separator ending a middle.
    const VocabData v = byte_vocab({"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"});
    const std::optional<serve::FimTokens> fim = serve::find_fim_tokens(v);
    ASSERT_TRUE(fim);
    EXPECT_EQ(fim->prefix, 265);
    EXPECT_EQ(fim->suffix, 266);
    EXPECT_EQ(fim->middle, 267);
    EXPECT_EQ(fim->end, (std::vector<std::int32_t>{268, 269}));
    const auto t = Tokenizer::create(v);
    std::vector<std::int32_t> want = {1, 265, kHello, kWor, 266};
    for (const std::int32_t s : t->encode("ab", false)) want.push_back(s);
    want.push_back(267);
    EXPECT_EQ(serve::infill_prompt(*t, *fim, {kHello, kWor}, "ab"), want)
        << "BOS, prefix token, the prefix, suffix token, the suffix (no BOS), middle token";
    EXPECT_EQ(t->encode("ab", true).front(), 1) << "(encode adds BOS when asked: infill_prompt did not)";
    // The other families, each found by its own set; half a set is none.
    for (const auto& [set, first] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"<fim_prefix>", "<fim_suffix>", "<fim_middle>"}, "<fim_prefix>"},
             {{"<\uFF5Cfim\u2581begin\uFF5C>", "<\uFF5Cfim\u2581hole\uFF5C>", "<\uFF5Cfim\u2581end\uFF5C>"}, "<\uFF5Cfim\u2581begin\uFF5C>"},
             {{"\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>", "\u2581<EOT>"}, "\u2581<PRE>"}}) {
        const VocabData other = byte_vocab(set);
        const auto found = serve::find_fim_tokens(other);
        ASSERT_TRUE(found) << first;
        EXPECT_EQ(other.tokens[std::size_t(found->prefix)], first);
        EXPECT_EQ(found->end.size(), set.size() - 3) << first;
    }
    EXPECT_FALSE(serve::find_fim_tokens(byte_vocab({"<|fim_prefix|>", "<|fim_middle|>"})));
    EXPECT_FALSE(serve::find_fim_tokens(byte_vocab()));
}

TEST(OpenAiRequest, ReadsEveryParameter) {
    const json body = {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 7}, {"temperature", 0.5}, {"top_p", 0.8},
                       {"seed", -3}, {"stop", {"x", "y"}}, {"stream", true}, {"stream_options", {{"include_usage", true}}},
                       {"logprobs", 2}, {"n", 1}, {"presence_penalty", 0.5}, {"user", "u"}, {"echo", false},
                       {"cache_salt", "tenant-7"}, {"logit_bias", {{"17", -100}, {"3", 2.5}}}, {"frequency_penalty", -1},
                       {"top_k", 40}, {"min_p", 0.05}, {"repeat_penalty", 1.1}, {"repeat_last_n", 32}};
    const serve::CompletionParams p = serve::parse_completion_request(body, false, limits());
    ASSERT_EQ(p.prompts.size(), 1u);
    EXPECT_EQ(p.prompts[0].text, "hi");
    EXPECT_FALSE(p.prompts[0].is_tokens || p.echo);
    EXPECT_EQ(*p.max_tokens, 7);
    EXPECT_FLOAT_EQ(p.temperature, 0.5f);
    EXPECT_FLOAT_EQ(p.top_p, 0.8f);
    EXPECT_EQ(*p.seed, std::uint64_t(std::int64_t(-3)));
    EXPECT_EQ(p.stop, (std::vector<std::string>{"x", "y"}));
    EXPECT_TRUE(p.stream && p.include_usage && p.logprobs);
    EXPECT_EQ(p.top_logprobs, 2);
    EXPECT_EQ(p.cache_salt, "tenant-7");
    const serve::LogitProcessing& lp = p.processing;
    EXPECT_EQ(lp.logit_bias, (std::vector<std::pair<std::int32_t, float>>{{17, -100.0f}, {3, 2.5f}}));
    EXPECT_FLOAT_EQ(lp.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(lp.frequency_penalty, -1.0f);
    EXPECT_EQ(lp.top_k, 40);
    EXPECT_FLOAT_EQ(lp.min_p, 0.05f);
    EXPECT_FLOAT_EQ(lp.repetition_penalty, 1.1f);
    EXPECT_EQ(lp.repetition_window, 32);
    const serve::LogitProcessing vllm =
        serve::parse_completion_request({{"prompt", "x"}, {"repetition_penalty", 1.2}, {"top_k", -1}}, false, limits()).processing;
    EXPECT_EQ(vllm.repetition_window, -1);  // vLLM: the whole sequence
    EXPECT_EQ(vllm.top_k, 0);               // -1: off

    const serve::CompletionParams t = serve::parse_completion_request({{"prompt", {1, 2, 99}}}, false, limits());
    ASSERT_EQ(t.prompts.size(), 1u);
    EXPECT_TRUE(t.prompts[0].is_tokens);
    EXPECT_EQ(t.prompts[0].tokens, (std::vector<std::int32_t>{1, 2, 99}));

    // Several prompts (a choice each), as lm-evaluation-harness sends them: token lists or strings.
    const serve::CompletionParams b = serve::parse_completion_request(
        {{"prompt", {{1, 2}, {3}}}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}}, false, limits());
    ASSERT_EQ(b.prompts.size(), 2u);
    EXPECT_EQ(b.prompts[1].tokens, (std::vector<std::int32_t>{3}));
    EXPECT_TRUE(b.echo && b.prompts[0].is_tokens);
    const serve::CompletionParams st = serve::parse_completion_request({{"prompt", {"a", "b", "c"}}}, false, limits());
    ASSERT_EQ(st.prompts.size(), 3u);
    EXPECT_EQ(serve::parse_completion_request({{"prompt", "a"}, {"n", 4}}, false, limits()).n, 4);
    EXPECT_EQ(st.prompts[2].text, "c");
    EXPECT_FALSE(t.max_tokens.has_value());
    EXPECT_FLOAT_EQ(t.temperature, 1.0f);  // OpenAI's defaults

    const json chat = {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
                       {"logprobs", true}, {"top_logprobs", 3}, {"max_completion_tokens", 9}};
    const serve::CompletionParams c = serve::parse_completion_request(chat, true, limits());
    ASSERT_EQ(c.messages.size(), 1u);
    EXPECT_EQ(c.messages[0].content, "ab");
    EXPECT_EQ(c.top_logprobs, 3);
    EXPECT_EQ(*c.max_tokens, 9);
}

TEST(OpenAiRequest, NamesWhatIsWrong) {
    auto expect = [](const json& body, bool chat, const std::string& param, const std::string& fragment) {
        try {
            serve::parse_completion_request(body, chat, limits());
            ADD_FAILURE() << body.dump() << ": no error";
        } catch (const serve::ApiError& e) {
            EXPECT_EQ(e.status(), 400);
            EXPECT_EQ(e.param(), param) << e.what();
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
            EXPECT_EQ(e.to_json()["error"]["type"], "invalid_request_error");
        }
    };
    expect({{"prompt", "x"}, {"max_tokens", -1}}, false, "max_tokens", "outside");
    expect({{"prompt", "x"}, {"max_tokens", 5000000000LL}}, false, "max_tokens", "outside");
    expect({{"prompt", "x"}, {"temperature", "warm"}}, false, "temperature", "expected a number");
    expect({{"prompt", "x"}, {"temperature", 2.5}}, false, "temperature", "outside");
    expect({{"prompt", "x"}, {"seed", 1.5}}, false, "seed", "integer");
    expect({{"prompt", "x"}, {"stop", {"a", 3}}}, false, "stop[1]", "string");
    expect({{"prompt", "x"}, {"stop", ""}}, false, "stop", "empty");
    expect({{"prompt", "x"}, {"frequency_penalty", 2.5}}, false, "frequency_penalty", "outside");
    expect({{"prompt", "x"}, {"logit_bias", {{"abc", 1}}}}, false, "logit_bias.abc", "token id");
    expect({{"prompt", "x"}, {"logit_bias", {{"100", 1}}}}, false, "logit_bias.100", "token id");
    expect({{"prompt", "x"}, {"logit_bias", {{"5", 101}}}}, false, "logit_bias.5", "outside");
    expect({{"prompt", "x"}, {"logit_bias", {1, 2}}}, false, "logit_bias", "expected an object");
    expect({{"prompt", "x"}, {"logit_bias", {{"1", 1}, {"01", 1}}}}, false, "logit_bias.1", "biased twice");
    expect({{"prompt", "x"}, {"repeat_last_n", 8}}, false, "repeat_last_n", "needs repeat_penalty");
    expect({{"prompt", "x"}, {"repeat_penalty", 1.1}, {"repetition_penalty", 1.1}}, false, "repeat_penalty", "one of");
    expect({{"prompt", "x"}, {"min_p", 1.5}}, false, "min_p", "outside");
    expect({{"prompt", "x"}, {"top_k", -2}}, false, "top_k", "outside");
    expect({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, false, "stream_options", "stream: true");
    expect({{"prompt", {"a", "b"}}, {"id_slot", 0}}, false, "id_slot", "one prompt");
    expect({{"prompt", {"a", 3}}}, false, "prompt[1]", "expected a string");
    expect({{"prompt", {{1}, 3}}}, false, "prompt[1]", "array of token ids");
    expect({{"prompt", {{1}, {100}}}}, false, "prompt[1][0]", "outside");
    json many = json::array();
    for (int i = 0; i < 65; ++i) many.push_back(json::array({1}));
    expect({{"prompt", many}}, false, "prompt", "at most 64");
    expect({{"prompt", "x"}, {"echo", 1}}, false, "echo", "boolean");
    expect({{"prompt", "x"}, {"n", 2}, {"keep_slot", true}}, false, "keep_slot", "one choice");
    expect({{"prompt", {"a", "b"}}, {"n", 40}}, false, "n", "80 choices");
    expect({{"prompt", "x"}, {"n", 0}}, false, "n", "outside");
    expect({{"prompt", {1, 100}}}, false, "prompt[1]", "outside");
    expect({{"prompt", "x"}, {"messages", json::array()}}, false, "messages", "Unrecognized");
    expect({{"messages", {{{"role", "user"}}}}}, true, "messages[0].content", "missing");
    expect({{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_calls", 1}}}}}, true, "messages[0].tool_calls", "only an assistant message");
    expect({{"messages", {{{"role", "user"}, {"content", "x"}, {"weight", 1}}}}}, true, "messages[0].weight", "unrecognized");
    expect({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}, true, "top_logprobs", "logprobs: true");
    expect({{"prompt", "x"}, {"logprobs", 21}}, false, "logprobs", "outside");
    expect({{"prompt", "x"}, {"cache_salt", ""}}, false, "cache_salt", "1 to 256 bytes");
    expect({{"prompt", "x"}, {"cache_salt", 7}}, false, "cache_salt", "string");
    try {
        serve::parse_request_json("{\"a\": ");
        ADD_FAILURE();
    } catch (const serve::ApiError& e) {
        EXPECT_EQ(e.status(), 400);
    }
}

TEST(Prometheus, HistogramsAreCumulativeAndEveryMetricTyped) {
    serve::EngineStats s;
    s.ttft.bounds = {0.1, 1.0};
    s.ttft.counts = {0, 0, 0};
    for (double x : {0.05, 0.5, 0.7, 5.0}) s.ttft.observe(x);
    s.decode_tokens = 100;
    s.decode_seconds = 4;
    serve::HttpCounters h;
    h.responses_by_status[400] = 3;
    const std::string t = serve::prometheus_text(s, h);
    EXPECT_NE(t.find("aqpim_time_to_first_token_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << t;
    EXPECT_NE(t.find("aqpim_time_to_first_token_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << t;
    EXPECT_NE(t.find("aqpim_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << t;
    EXPECT_NE(t.find("aqpim_time_to_first_token_seconds_count 4\n"), std::string::npos);
    EXPECT_NE(t.find("aqpim_decode_tokens_per_second 25\n"), std::string::npos);
    EXPECT_NE(t.find("aqpim_http_responses_total{status=\"400\"} 3\n"), std::string::npos);
    // Every sample line's metric has a # TYPE line.
    std::size_t pos = 0;
    while (pos < t.size()) {
        const std::size_t end = t.find('\n', pos);
        const std::string line = t.substr(pos, end - pos);
        pos = end + 1;
        if (line.empty() || line[0] == '#') continue;
        std::string name = line.substr(0, line.find_first_of("{ "));
        for (const char* suffix : {"_bucket", "_sum", "_count"})
            if (name.size() > std::strlen(suffix) && name.ends_with(suffix) && t.find("# TYPE " + name + " ") == std::string::npos)
                name.resize(name.size() - std::strlen(suffix));
        EXPECT_NE(t.find("# TYPE " + name + " "), std::string::npos) << line;
    }
}

}  // namespace
}  // namespace aqpim
