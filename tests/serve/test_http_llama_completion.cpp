// llama-server's own /completion and /infill over HTTP (docs/serve.md "llama-server's own
// endpoints"): its result object, its stream (no [DONE]), how a text ended, its probabilities
// against the OpenAI endpoint's logprobs of the same tokens, several prompts, refusals, and the
// infill prompt fitted to the context.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "serve/http_test_util.h"
#include "serve/infill.h"

namespace aqpim {
namespace {

using nlohmann::json;

const char* kPrompt = "It was a truth universally acknowledged";

/// The data events of a llama-server stream, parsed (a test failure if framing or status is wrong).
std::vector<json> stream_events(httplib::Client& c, const std::string& path, json body) {
    body["stream"] = true;
    auto r = test::post_json(c, path, body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    std::vector<json> out;
    if (!r) return out;
    bool framing_ok = false;
    for (const std::string& e : test::sse_data(r->body, &framing_ok)) out.push_back(json::parse(e));
    EXPECT_TRUE(framing_ok) << r->body;
    return out;
}

TEST(HttpLlamaCompletion, TheResultIsLlamaServersAndItsTokensAreTheOpenAiEndpoints) {
    test::TestServer s(test::austen_serve_model(), test::small_engine("pq"));
    auto c = s.client();
    const json r = test::post(c, "/completion", {{"prompt", kPrompt}, {"n_predict", 12}, {"temperature", 0}, {"n_probs", 2},
                                                 {"return_tokens", true}});
    const json v1 = test::post(c, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 2}});
    const json& choice = v1["choices"][0];
    // Greedy is greedy whatever the truncation around it: the same text and tokens.
    EXPECT_EQ(r["content"], choice["text"]);
    ASSERT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(r["stop_type"], "limit");
    EXPECT_EQ(r["stopping_word"], "");
    EXPECT_EQ(r["stop"], true);
    EXPECT_EQ(r["tokens_predicted"], 12);
    ASSERT_EQ(r["tokens"].size(), 12u);
    EXPECT_EQ(r["tokens_evaluated"], v1["usage"]["prompt_tokens"]);
    EXPECT_EQ(r["timings"]["prompt_n"], r["tokens_evaluated"]) << "nothing came from a store: every prompt token was prefilled";
    EXPECT_EQ(r["tokens_cached"], 0);
    EXPECT_EQ(r["timings"]["predicted_n"], 12);
    EXPECT_GT(r["timings"]["predicted_per_second"].get<double>(), 0.0);
    EXPECT_GE(r["id_slot"].get<int>(), 0);
    EXPECT_EQ(r["prompt"], kPrompt);
    EXPECT_EQ(r["has_new_line"], r["content"].get<std::string>().find('\n') != std::string::npos);
    EXPECT_EQ(r["generation_settings"]["n_predict"], 12);
    EXPECT_EQ(r["generation_settings"]["top_k"], 40);
    EXPECT_EQ(r["truncated"], false);
    // completion_probabilities: the model's own log probabilities, as the OpenAI endpoint's.
    const json& probs = r["completion_probabilities"];
    ASSERT_EQ(probs.size(), 12u);
    for (std::size_t i = 0; i < 12; ++i) {
        EXPECT_EQ(probs[i]["id"], r["tokens"][i]);
        EXPECT_EQ(probs[i]["token"], choice["logprobs"]["tokens"][i]);
        EXPECT_NEAR(probs[i]["logprob"].get<double>(), choice["logprobs"]["token_logprobs"][i].get<double>(), 1e-6);
        ASSERT_EQ(probs[i]["top_logprobs"].size(), 2u);
        EXPECT_EQ(probs[i]["top_logprobs"][0]["id"], r["tokens"][i]) << "greedy: the best alternative is the token";
        std::string text;
        for (const json& b : probs[i]["bytes"]) text += char(b.get<int>());
        EXPECT_EQ(text, probs[i]["token"]);
    }
    // /completions is the same endpoint (llama-server's, not OpenAI's).
    const json again = test::post(c, "/completions", {{"prompt", kPrompt}, {"n_predict", 12}, {"temperature", 0}});
    EXPECT_EQ(again["content"], r["content"]);
    EXPECT_FALSE(again.contains("completion_probabilities"));
    EXPECT_EQ(again["tokens"], json::array()) << "tokens only with return_tokens";
}

TEST(HttpLlamaCompletion, TheStreamAddsUpToTheResult) {
    test::TestServer s(test::austen_serve_model(), test::small_engine("pq"));
    auto c = s.client();
    const json body = {{"prompt", kPrompt}, {"n_predict", 24}, {"seed", 7}, {"return_tokens", true}};
    const json whole = test::post(c, "/completion", body);
    json timed = body;
    timed["timings_per_token"] = true;
    const std::vector<json> events = stream_events(c, "/completion", timed);
    ASSERT_GE(events.size(), 2u);
    std::string text;
    json tokens = json::array();
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        EXPECT_EQ(events[i]["stop"], false);
        EXPECT_EQ(events[i]["index"], 0);
        text += events[i]["content"].get<std::string>();
        for (const json& t : events[i]["tokens"]) tokens.push_back(t);
        EXPECT_EQ(events[i]["tokens_predicted"], tokens.size());
        EXPECT_TRUE(events[i].contains("timings"));
    }
    EXPECT_EQ(text, whole["content"]) << "the same seed alone: the same text";
    EXPECT_EQ(tokens, whole["tokens"]);
    const json& last = events.back();
    EXPECT_EQ(last["stop"], true);
    EXPECT_EQ(last["content"], "");
    EXPECT_EQ(last["stop_type"], whole["stop_type"]);
    EXPECT_EQ(last["tokens_predicted"], whole["tokens_predicted"]);
    EXPECT_EQ(last["has_new_line"], whole["has_new_line"]);
}

TEST(HttpLlamaCompletion, StopWordsEosAndIgnoreEos) {
    test::TestServer s(test::austen_serve_model(), test::small_engine());
    auto c = s.client();
    const json base = {{"prompt", kPrompt}, {"n_predict", 24}, {"temperature", 0}};
    const std::string text = test::post(c, "/completion", base)["content"];
    ASSERT_GT(text.size(), 8u);
    const std::string word = text.substr(4, 3);
    json stopped = base;
    stopped["stop"] = {word};
    stopped["return_tokens"] = true;
    const json r = test::post(c, "/completion", stopped);
    EXPECT_EQ(r["stop_type"], "word");
    EXPECT_EQ(r["stopping_word"], word);
    EXPECT_EQ(r["content"], text.substr(0, text.find(word)));
    // Every generated token is listed, the stop string's too (their text is not sent).
    const auto& tok = *test::austen_serve_model().tokenizer;
    ASSERT_EQ(r["tokens"].size(), r["tokens_predicted"].get<std::size_t>());
    std::vector<std::int32_t> ids = r["tokens"];
    const std::string all = tok.decode(ids);
    EXPECT_EQ(all.substr(0, r["content"].get<std::string>().size() + word.size()), r["content"].get<std::string>() + word);
    // EOS made the only choice: "eos" with no token; ignore_eos bans it and the text runs to the limit.
    const std::int32_t eos = test::austen_serve_model().tokenizer->eos();
    json forced = base;
    forced["logit_bias"] = json::array({json::array({eos, 100})});
    forced["return_tokens"] = true;
    forced["n_probs"] = 1;
    const json e = test::post(c, "/completion", forced);
    EXPECT_EQ(e["stop_type"], "eos");
    EXPECT_EQ(e["content"], "");
    EXPECT_EQ(e["tokens"], json::array({eos})) << "EOS is a generated token here, as llama-server counts it";
    EXPECT_EQ(e["tokens_predicted"], 1);
    ASSERT_EQ(e["completion_probabilities"].size(), 1u);
    EXPECT_EQ(e["completion_probabilities"][0]["id"], eos);
    EXPECT_LT(e["completion_probabilities"][0]["logprob"].get<double>(), 0.0) << "EOS's own log probability (unbiased)";
    EXPECT_EQ(e["completion_probabilities"][0]["top_logprobs"].size(), 1u);
    // A byte token's bytes are its byte (its text is not UTF-8 alone).
    const auto& vocab_tokens = tok.vocab().tokens;
    const auto byte_c3 = std::int32_t(std::find(vocab_tokens.begin(), vocab_tokens.end(), "<0xC3>") - vocab_tokens.begin());
    ASSERT_LT(std::size_t(byte_c3), vocab_tokens.size());
    json one_byte = base;
    one_byte["n_predict"] = 1;
    one_byte["n_probs"] = 1;
    one_byte["logit_bias"] = json::array({json::array({byte_c3, 100})});
    const json bytes = test::post(c, "/completion", one_byte)["completion_probabilities"][0];
    EXPECT_EQ(bytes["id"], byte_c3);
    EXPECT_EQ(bytes["bytes"], json::array({0xC3}));
    // A text whose end is held as the start of a stop string that never comes: every token once.
    json held = base;
    held["stop"] = {text.substr(text.size() - 2) + "QQQ"};
    held["return_tokens"] = true;
    held["n_probs"] = 1;
    const json h = test::post(c, "/completion", held);
    EXPECT_EQ(h["content"], text);
    EXPECT_EQ(h["tokens"].size(), h["tokens_predicted"].get<std::size_t>());
    EXPECT_EQ(h["completion_probabilities"].size(), h["tokens_predicted"].get<std::size_t>());
    forced["ignore_eos"] = true;
    const json ignored = test::post(c, "/completion", forced);
    EXPECT_EQ(ignored["stop_type"], "limit");
    EXPECT_EQ(ignored["tokens_predicted"], 24);
    // A logit_bias text: each of its tokens; false: never drawn (the greedy first token banned).
    json banned = base;
    banned["n_predict"] = 1;
    banned["return_tokens"] = true;
    const json first = test::post(c, "/completion", banned);
    banned["logit_bias"] = json::array({json::array({first["tokens"][0], false})});
    EXPECT_NE(test::post(c, "/completion", banned)["tokens"][0], first["tokens"][0]);
}

TEST(HttpLlamaCompletion, IndentationAndTimeEndACodeCompletion) {
    test::TestServer s(test::austen_serve_model(), test::small_engine());
    auto c = s.client();
    const json base = {{"prompt", kPrompt}, {"n_predict", 120}, {"temperature", 0}};
    const std::string full = test::post(c, "/completion", base)["content"];
    const std::size_t nl = full.find('\n');
    ASSERT_NE(nl, std::string::npos) << "the greedy text needs a new line for this test: " << full;
    ASSERT_LT(nl + 2, full.size());
    // n_indent 1: the first line starting in the output whose first character other than a space
    // or tab comes after none ends the text before that character (austen-13m writes no indentation).
    std::size_t cut = std::string::npos;
    bool at_line_start = false;
    int indent = 0;
    for (std::size_t i = 0; i < full.size() && cut == std::string::npos; ++i) {
        if (full[i] == '\n' && at_line_start && indent < 1) cut = i;  // a blank line
        else if (full[i] == '\n') at_line_start = true, indent = 0;
        else if (at_line_start && (full[i] == ' ' || full[i] == '\t')) ++indent;
        else if (at_line_start) at_line_start = false, cut = indent < 1 ? i : cut;
    }
    ASSERT_NE(cut, std::string::npos);
    json indented = base;
    indented["n_indent"] = 1;
    const json r = test::post(c, "/completion", indented);
    EXPECT_EQ(r["content"], full.substr(0, cut));
    EXPECT_EQ(r["stop_type"], "limit");
    // t_max_predict_ms 1: past a millisecond and with a new line written, the text ends.
    json timed = base;
    timed["t_max_predict_ms"] = 1;
    const json t = test::post(c, "/completion", timed);
    const std::string text = t["content"];
    EXPECT_EQ(t["stop_type"], "limit");
    EXPECT_EQ(full.compare(0, text.size(), text), 0) << "a prefix of the whole: " << text;
    EXPECT_NE(text.find('\n'), std::string::npos);
    EXPECT_LT(text.size(), full.size());
}

TEST(HttpLlamaCompletion, SeveralPromptsGiveAnArrayInOrder) {
    test::TestServer s(test::austen_serve_model(), test::small_engine());
    auto c = s.client();
    const json a = test::post(c, "/completion", {{"prompt", "Emma"}, {"n_predict", 6}, {"temperature", 0}});
    const json b = test::post(c, "/completion", {{"prompt", kPrompt}, {"n_predict", 6}, {"temperature", 0}});
    const json both = test::post(c, "/completion", {{"prompt", {"Emma", kPrompt}}, {"n_predict", 6}, {"temperature", 0}});
    ASSERT_TRUE(both.is_array());
    ASSERT_EQ(both.size(), 2u);
    EXPECT_EQ(both[0]["index"], 0);
    EXPECT_EQ(both[0]["content"], a["content"]);
    EXPECT_EQ(both[1]["index"], 1);
    EXPECT_EQ(both[1]["content"], b["content"]);
    // Token ids and text mixed: BOS only where the prompt starts with text.
    const auto& tok = *test::austen_serve_model().tokenizer;
    const std::vector<std::int32_t> ids = tok.encode("Emma", false);
    json mixed = json::array();
    for (const std::int32_t t : ids) mixed.push_back(t);
    mixed.push_back(" was");
    const json m = test::post(c, "/completion", {{"prompt", mixed}, {"n_predict", 1}});
    EXPECT_EQ(m["tokens_evaluated"], ids.size() + tok.encode(" was", false).size());
    // Streamed, interleaved: each index's chunks, then its result.
    const std::vector<json> events = stream_events(c, "/completion", {{"prompt", {"Emma", kPrompt}}, {"n_predict", 6}, {"temperature", 0}});
    std::string texts[2];
    int results = 0;
    for (const json& e : events) {
        const int i = e["index"];
        texts[i] += e["content"].get<std::string>();
        results += e["stop"].get<bool>();
    }
    EXPECT_EQ(results, 2);
    EXPECT_EQ(texts[0], a["content"]);
    EXPECT_EQ(texts[1], b["content"]);
}

TEST(HttpLlamaCompletion, ResponseFieldsAndRefusals) {
    test::TestServer s(test::austen_serve_model(), test::small_engine());
    auto c = s.client();
    const json r = test::post(c, "/completion", {{"prompt", kPrompt}, {"n_predict", 3},
                                                 {"response_fields", {"content", "timings/prompt_n", "nothing/here"}}});
    EXPECT_EQ(r.size(), 2u) << r.dump();
    EXPECT_TRUE(r.contains("content"));
    EXPECT_EQ(r["timings/prompt_n"], test::austen_serve_model().tokenizer->encode(kPrompt, true).size());
    // Each refusal an OpenAI-style error object naming the field.
    for (const auto& [body, param] : std::vector<std::pair<json, std::string>>{
             {{{"prompt", kPrompt}, {"mirostat", 2}}, "mirostat"},
             {{{"prompt", kPrompt}, {"samplers", {"min_p", "top_k"}}}, "samplers"},
             {{{"prompt", kPrompt}, {"n_predict", 4096}}, "n_predict"},
             {{{"prompt", json::array()}}, "prompt"},
             {{{"prompt", kPrompt}, {"temperature", "warm"}}, "temperature"}}) {
        const json e = test::post(c, "/completion", body, 400);
        EXPECT_EQ(e["error"]["param"], param) << body.dump();
    }
    // /tokenize with_pieces (llama-server's): each token's text, its bytes where they are not UTF-8.
    const json plain = test::post(c, "/tokenize", {{"content", "Emma \u00e9"}});
    const json pieces = test::post(c, "/tokenize", {{"content", "Emma \u00e9"}, {"with_pieces", true}});
    ASSERT_EQ(pieces["tokens"].size(), plain["tokens"].size());
    std::string joined;
    bool some_bytes = false;
    for (std::size_t i = 0; i < plain["tokens"].size(); ++i) {
        EXPECT_EQ(pieces["tokens"][i]["id"], plain["tokens"][i]);
        const json& piece = pieces["tokens"][i]["piece"];
        if (piece.is_string()) joined += piece.get<std::string>();
        else for (const json& b : piece) joined += char(b.get<int>()), some_bytes = true;
    }
    EXPECT_TRUE(some_bytes) << "austen-13m writes \u00e9 as two byte tokens";
    EXPECT_EQ(joined, " Emma \u00e9");
    // A model without fill-in-the-middle tokens: 501, as llama-server answers.
    const json e = test::post(c, "/infill", {{"input_prefix", "a"}, {"input_suffix", "b"}}, 501);
    EXPECT_NE(test::post(c, "/completion", {{"prompt", kPrompt}, {"n_predict", 4096}}, 400)["error"]["message"].get<std::string>().find(
                  "n_predict (4096) exceeds the context of 512 tokens"), std::string::npos);
    EXPECT_EQ(e["error"]["type"], "not_supported_error");
    // Every slot free again.
    auto slots = c.Get("/slots");
    ASSERT_TRUE(slots);
    for (const json& slot : json::parse(slots->body)) EXPECT_TRUE(test::slot_free(slot)) << slot;
}

TEST(HttpLlamaCompletion, ApplyTemplateGivesTheChatPromptThatCompletionContinues) {
    test::TestServer s(test::austen_serve_model(), test::small_engine());
    auto c = s.client();
    const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Who is Emma?"}}};
    const json t = test::post(c, "/apply-template", {{"messages", messages}});
    const std::string prompt = t["prompt"];
    EXPECT_NE(prompt.find("Who is Emma?"), std::string::npos);
    // The chat endpoint's prompt is that text: the same tokens, the same greedy answer.
    const json chat = test::post(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
    const json done = test::post(c, "/completion", {{"prompt", prompt}, {"n_predict", 8}, {"temperature", 0}});
    EXPECT_EQ(done["tokens_evaluated"], chat["usage"]["prompt_tokens"]);
    // (the chat answer may end earlier, at its format's end of turn)
    const std::string answer = chat["choices"][0]["message"]["content"];
    EXPECT_EQ(done["content"].get<std::string>().substr(0, answer.size()), answer);
    EXPECT_EQ(test::post(c, "/apply-template", {{"prompt", "x"}}, 400)["error"]["param"], "prompt");
    EXPECT_EQ(test::post(c, "/apply-template", json::object(), 400)["error"]["param"], "messages");
}

TEST(HttpLlamaCompletion, InfillBuildsTheRepositoryPromptAndFitsItToTheContext) {
    const LoadedModel m = test::fim_serve_model(true);
    test::TestServer s(m, test::small_engine());
    auto c = s.client();
    const auto& tok = *m.tokenizer;
    const auto fim = serve::find_fim_tokens(tok.vocab());
    ASSERT_TRUE(fim);
    const std::string prefix = "def add(a, b):\n    ", suffix = "\n    return c\n";
    const json extra = {{{"filename", "util.py"}, {"text", "def mul(a, b):\n    return a * b\n"}}};
    const json r = test::post(c, "/infill", {{"input_prefix", prefix}, {"input_suffix", suffix}, {"input_extra", extra},
                                             {"prompt", "c ="}, {"n_predict", 4}, {"seed", 1}});
    const serve::InfillParts parts{serve::infill_extra_tokens(tok, *fim, {{"util.py", "def mul(a, b):\n    return a * b\n"}}),
                                   tok.encode(prefix, false), tok.encode("c =", false), tok.encode(suffix, false)};
    const std::vector<std::int32_t> want = serve::infill_prompt(tok, *fim, parts, 100000);
    EXPECT_EQ(r["tokens_evaluated"], want.size());
    EXPECT_GT(parts.extra.size(), 10u);
    // A long prefix in a 512-token context with 100 tokens asked for: the prompt keeps the prefix's
    // end and the suffix's start, and the whole request fits.
    std::string long_prefix;
    for (int i = 0; i < 300; ++i) long_prefix += "x" + std::to_string(i) + " = " + std::to_string(i) + "\n";
    const json fitted = test::post(c, "/infill", {{"input_prefix", long_prefix}, {"input_suffix", suffix}, {"n_predict", 100},
                                                  {"return_tokens", true}, {"seed", 2}});
    EXPECT_LE(fitted["tokens_evaluated"].get<int>() + 100, 512);
    EXPECT_GT(fitted["tokens_evaluated"].get<int>(), 400) << "the room is used";
    // llama.vim's samplers, its infill sampler last: each middle ends at an end token or the limit.
    for (int seed = 1; seed <= 4; ++seed) {
        const json v = test::post(c, "/infill", {{"input_prefix", prefix}, {"input_suffix", suffix}, {"n_predict", 16},
                                                 {"samplers", {"top_k", "top_p", "infill"}}, {"seed", seed}});
        EXPECT_TRUE(v["stop_type"] == "eos" || v["stop_type"] == "limit") << v.dump();
        EXPECT_EQ(v["generation_settings"]["samplers"], json({"top_k", "top_p", "infill"}));
    }
    // No room left for the prompt: a 400 naming the length, not a prompt without its prefix.
    EXPECT_EQ(test::post(c, "/infill", {{"input_prefix", prefix}, {"input_suffix", suffix}, {"n_predict", 512}}, 400)["error"]["param"],
              "n_predict");
    // Fields of /infill only there; a model's own /completion still refuses them.
    EXPECT_EQ(test::post(c, "/completion", {{"prompt", "x"}, {"input_suffix", "y"}}, 400)["error"]["param"], "input_suffix");
    EXPECT_EQ(test::post(c, "/infill", {{"input_prefix", "x"}}, 400)["error"]["param"], "input_suffix");
}

}  // namespace
}  // namespace aqpim
