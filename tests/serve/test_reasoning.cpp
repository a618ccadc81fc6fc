// Reasoning answers split into reasoning_content and content (serve/reasoning.h): the rules on
// hand-checked answers, a stream cut anywhere sending what the whole answer gives, and the format
// chosen from the chat template.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "aqpim/error.h"
#include "serve/reasoning.h"

namespace aqpim {
namespace {

using serve::ReasoningFormat;
using serve::ReasoningSplit;
using serve::ReasoningStart;

TEST(Reasoning, AnAnswerThatOpensWithThinkHoldsItsReasoning) {
    const auto expect = [](const std::string& answer, const std::string& reasoning, const std::string& content) {
        const ReasoningSplit::Piece p = ReasoningSplit::whole(answer);
        EXPECT_EQ(p.reasoning, reasoning) << answer;
        EXPECT_EQ(p.content, content) << answer;
    };
    expect("<think>\nBath or York?\n</think>\n\nBath.", "\nBath or York?\n", "Bath.");
    expect(" \n<think>a</think>b c", "a", "b c");
    expect("<think></think>", "", "");
    expect("<think>cut short by max_tokens", "cut short by max_tokens", "");  // the reasoning so far
    expect("<think>a</think>b</think>c", "a", "b</think>c");  // the first </think> ends it
    expect("Plain. <think>x</think>y", "", "Plain. <think>x</think>y");  // not opened at the start: all content
    expect("  Plain.", "", "  Plain.");  // as written
    expect("<thin", "", "<thin");
    expect("<think", "", "<think");
    expect("", "", "");
    expect("{\"a\": 1}", "", "{\"a\": 1}");  // JSON never opens with <think>
}

TEST(Reasoning, APromptThatOpensTheReasoningStartsTheAnswerInIt) {
    // DeepSeek-R1's revised template and QwQ's end the prompt with <think>\n: the model writes no
    // <think> of its own (vLLM's deepseek_r1 parser reads it so); a prompt ending with </think>
    // (thinking turned off) leaves an answer that is all content.
    const ReasoningSplit::Piece open = ReasoningSplit::whole("Bath or York?\n</think>\n\nBath.", ReasoningStart::open);
    EXPECT_EQ(open.reasoning, "Bath or York?\n");
    EXPECT_EQ(open.content, "Bath.");
    EXPECT_EQ(ReasoningSplit::whole("never closed", ReasoningStart::open).reasoning, "never closed");
    const ReasoningSplit::Piece closed = ReasoningSplit::whole("<think>x</think>y", ReasoningStart::closed);
    EXPECT_EQ(closed.reasoning, "");
    EXPECT_EQ(closed.content, "<think>x</think>y");

    EXPECT_EQ(serve::reasoning_start_of("<|im_start|>assistant\n<think>\n"), ReasoningStart::open);
    EXPECT_EQ(serve::reasoning_start_of("<|im_start|>assistant\n<think>\n\n</think>\n\n"), ReasoningStart::closed);
    EXPECT_EQ(serve::reasoning_start_of("<|im_start|>assistant\n"), ReasoningStart::free);
    EXPECT_EQ(serve::reasoning_start_of(""), ReasoningStart::free);
}

TEST(Reasoning, TheTemplateSaysWhetherItOpensTheReasoning) {
    // As the templates' Jinja source holds them: DeepSeek-R1's revised one escapes its newline,
    // QwQ's too (a Jinja string's \n); written as a newline it is the same prompt.
    EXPECT_TRUE(serve::template_opens_reasoning("{% if add_generation_prompt %}{{'<\uFF5CAssistant\uFF5C><think>\\n'}}{% endif %}"));
    EXPECT_TRUE(serve::template_opens_reasoning(R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n<think>\n' }}{%- endif %})"));
    EXPECT_TRUE(serve::template_opens_reasoning("{{- '<|im_start|>assistant\n<think>\n' }}"));
    // DeepSeek-R1's first template and Qwen3's (whose <think> is the model's, or an empty one
    // written only when enable_thinking is false) do not.
    EXPECT_FALSE(serve::template_opens_reasoning("{% if add_generation_prompt %}{{'<\uFF5CAssistant\uFF5C>'}}{% endif %}"));
    EXPECT_FALSE(serve::template_opens_reasoning(
        R"({{- '<|im_start|>assistant\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %})"));
    EXPECT_FALSE(serve::template_opens_reasoning(R"({{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content }})"));

    EXPECT_EQ(serve::reasoning_prompt_end(true, true), "<think>\n");
    EXPECT_EQ(serve::reasoning_prompt_end(false, true), "");
    EXPECT_EQ(serve::reasoning_prompt_end(true, false), "<think>\n\n</think>\n\n");
    EXPECT_EQ(serve::reasoning_prompt_end(false, false), "<think>\n\n</think>\n\n");
}

TEST(Reasoning, AStreamCutAnywhereSendsWhatTheWholeAnswerGives) {
    const std::vector<std::string> answers = {"<think>\nplan </thi nk></think>\n \nAnswer </think> done", " <think>x</think>",
                                              "<thinkless answer", "  <think>never closed </", "\n\nno reasoning at all"};
    for (const ReasoningStart start : {ReasoningStart::free, ReasoningStart::open, ReasoningStart::closed})
    for (const std::string& a : answers) {
        const ReasoningSplit::Piece whole = ReasoningSplit::whole(a, start);
        for (std::size_t cut1 = 0; cut1 <= a.size(); ++cut1)
            for (std::size_t cut2 = cut1; cut2 <= a.size(); ++cut2) {
                ReasoningSplit s(start);
                ReasoningSplit::Piece got;
                bool content_seen = false;
                for (const auto& [from, to] : {std::pair{std::size_t(0), cut1}, {cut1, cut2}, {cut2, a.size()}}) {
                    const ReasoningSplit::Piece p = s.feed(std::string_view(a).substr(from, to - from));
                    EXPECT_FALSE(content_seen && !p.reasoning.empty()) << "reasoning after content: " << a;
                    content_seen = content_seen || !p.content.empty();
                    got.reasoning += p.reasoning;
                    got.content += p.content;
                }
                const ReasoningSplit::Piece end = s.finish();
                got.reasoning += end.reasoning;
                got.content += end.content;
                EXPECT_EQ(got.reasoning, whole.reasoning) << a << " cut at " << cut1 << ", " << cut2;
                EXPECT_EQ(got.content, whole.content) << a << " cut at " << cut1 << ", " << cut2;
            }
    }
}

TEST(Reasoning, TheFormatComesFromTheFlagOrTheTemplate) {
    EXPECT_EQ(serve::parse_reasoning_format("auto", "{{ '<think>' }}...{{ '</think>' }}", false), ReasoningFormat::deepseek);
    EXPECT_EQ(serve::parse_reasoning_format("auto", "", true), ReasoningFormat::deepseek) << "DeepSeek-R1's template";
    EXPECT_EQ(serve::parse_reasoning_format("auto", "<|im_start|>", false), ReasoningFormat::none);
    EXPECT_EQ(serve::parse_reasoning_format("none", "</think>", true), ReasoningFormat::none);
    EXPECT_EQ(serve::parse_reasoning_format("deepseek", "", false), ReasoningFormat::deepseek);
    EXPECT_THROW(serve::parse_reasoning_format("qwen", "", false), Error);
}

}  // namespace
}  // namespace aqpim
