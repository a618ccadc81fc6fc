#pragma once
// Chat prompts for /v1/chat/completions (docs/serve.md, "Chat templates"). A model's Jinja chat
// template is recognised by its markers as one of the common formats and rendered by hand here;
// Jinja is never executed. A model without one (or with one we do not recognise) gets `plain`.

#include <string>
#include <string_view>
#include <vector>

namespace aqpim::serve {

enum class ChatFormat { plain, llama2, llama3, chatml, mistral, gemma, phi3, phi4, deepseek };

/// "plain", "llama2", "llama3", "chatml", "mistral", "gemma", "phi3", "phi4", "deepseek".
const char* chat_format_name(ChatFormat f);
/// The inverse of chat_format_name (--chat-template); aqpim::Error naming the accepted names.
ChatFormat parse_chat_format(std::string_view name);
/// The format a Jinja template is: phi4 (<|im_sep|>), chatml (<|im_start|> without it), llama3
/// (<|start_header_id|>), llama2 ([INST] with <<SYS>>), mistral ([INST] without <<SYS>>), gemma
/// (<start_of_turn>), phi3 (<|user|> and <|end|>), deepseek (<｜User｜>, DeepSeek-R1 and its
/// distills); plain for anything else or empty.
ChatFormat detect_chat_format(std::string_view jinja);

struct ChatMessage {
    std::string role;     ///< system, user or assistant
    std::string content;
};

/// The special-token texts a format needs from the vocabulary (llama2, mistral: BOS and EOS
/// between turns; deepseek: EOS after an assistant turn). BOS at the very start is the tokenizer's, never in the rendered text.
struct ChatTokens {
    std::string bos, eos;
};

/// The prompt text of `messages` ending where the assistant's reply begins. Roles other than
/// system/user/assistant, a system message after the first, or a conversation that does not end
/// with a user message (llama2, mistral, gemma: turns must alternate) are an aqpim::Error naming
/// the message index.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatTokens& tokens);

/// Texts that end the assistant's turn in this format (they are also stop strings of a chat
/// request, so a model that does not sample EOS still stops at its turn's end).
std::vector<std::string> chat_stop_strings(ChatFormat format, const ChatTokens& tokens);

}  // namespace aqpim::serve
