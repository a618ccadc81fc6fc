#pragma once
// Reasoning models' answers (DeepSeek-R1 and its distills, Qwen3, QwQ: llama-server's
// `--reasoning-format deepseek`, vLLM's `deepseek_r1` reasoning parser; docs/serve.md "Reasoning"):
// an answer that opens with <think> (after whitespace) holds its reasoning up to </think>, sent as
// `reasoning_content`; what follows, its leading whitespace dropped, is the content. An answer
// that does not open with <think> is all content, as written.

#include <cstdint>
#include <string>
#include <string_view>

namespace aqpim::serve {

inline constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";

/// How the server reads reasoning (--reasoning-format).
enum class ReasoningFormat : std::uint8_t {
    none,      ///< the whole answer is content
    deepseek,  ///< <think>...</think> is reasoning_content
};
/// "none", "deepseek"; "auto" (the default): deepseek when the model's chat template writes
/// </think> or is DeepSeek-R1's, none otherwise. Anything else: aqpim::Error naming the values.
ReasoningFormat parse_reasoning_format(std::string_view name, std::string_view chat_template, bool deepseek_template);
const char* reasoning_format_name(ReasoningFormat f);

/// Where a chat prompt leaves the answer: `open` (the prompt ends with <think>: the answer
/// reasons up to </think>), `closed` (the prompt ends with </think>: the answer is content),
/// `free` (the answer may open with <think> or not).
enum class ReasoningStart : std::uint8_t { free, open, closed };
/// Read from the prompt's text, whitespace at its end aside.
ReasoningStart reasoning_start_of(std::string_view prompt);

/// Whether a Jinja chat template opens the reasoning itself: its generation prompt ends with
/// <think> (DeepSeek-R1's revised template `<｜Assistant｜><think>\n`, QwQ's
/// `<|im_start|>assistant\n<think>\n`), so the model writes no <think> of its own.
bool template_opens_reasoning(std::string_view jinja);
/// What the reasoning adds to a chat prompt's end: "<think>\n" where the template opens the
/// reasoning; with `thinking` false (chat_template_kwargs.enable_thinking, --reasoning-budget 0)
/// an empty reasoning, "<think>\n\n</think>\n\n" (Qwen3's template without thinking).
std::string_view reasoning_prompt_end(bool template_opens, bool thinking);

/// The length of the longest tail of `s` that is a proper beginning of `tag`.
std::size_t partial_tag_at_end(std::string_view s, std::string_view tag);

/// Splits an answer as it streams: each piece of text in, what can be sent now out. Text that may
/// still be the beginning of <think> (at the start) or of </think> (in the reasoning) is held
/// until the next piece shows what it is, so a stream sends exactly what whole() gives.
class ReasoningSplit {
public:
    struct Piece {
        std::string reasoning, content;
    };
    /// `start`: where the prompt left the answer (open: it starts in the reasoning; closed: it is
    /// all content).
    explicit ReasoningSplit(ReasoningStart start = ReasoningStart::free);
    Piece feed(std::string_view text);
    /// The answer ended: what was held (a reasoning cut short stays reasoning).
    Piece finish();
    /// A whole answer, split as its stream would be.
    static Piece whole(std::string_view text, ReasoningStart start = ReasoningStart::free);

private:
    enum class State : std::uint8_t { opening, reasoning, after, content };
    State state_ = State::opening;
    std::string held_;  ///< opening: the text so far; reasoning: a tail that may begin </think>
};

}  // namespace aqpim::serve
