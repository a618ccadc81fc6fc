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

/// How the server reads reasoning (--reasoning-format).
enum class ReasoningFormat : std::uint8_t {
    none,      ///< the whole answer is content
    deepseek,  ///< <think>...</think> is reasoning_content
};
/// "none", "deepseek"; "auto" (the default): deepseek when the model's chat template writes
/// </think> or is DeepSeek-R1's, none otherwise. Anything else: aqpim::Error naming the values.
ReasoningFormat parse_reasoning_format(std::string_view name, std::string_view chat_template, bool deepseek_template);
const char* reasoning_format_name(ReasoningFormat f);

/// Splits an answer as it streams: each piece of text in, what can be sent now out. Text that may
/// still be the beginning of <think> (at the start) or of </think> (in the reasoning) is held
/// until the next piece shows what it is, so a stream sends exactly what whole() gives.
class ReasoningSplit {
public:
    struct Piece {
        std::string reasoning, content;
    };
    Piece feed(std::string_view text);
    /// The answer ended: what was held (a reasoning cut short stays reasoning).
    Piece finish();
    /// A whole answer, split as its stream would be.
    static Piece whole(std::string_view text);

private:
    enum class State : std::uint8_t { opening, reasoning, after, content };
    State state_ = State::opening;
    std::string held_;  ///< opening: the text so far; reasoning: a tail that may begin </think>
};

}  // namespace aqpim::serve
