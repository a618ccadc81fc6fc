#include "serve/chat_template.h"

#include "aqpim/error.h"
#include "core/text_space.h"

namespace aqpim::serve {

namespace {

constexpr ChatFormat kFormats[] = {ChatFormat::plain, ChatFormat::llama2, ChatFormat::llama3, ChatFormat::chatml, ChatFormat::mistral,
                                   ChatFormat::gemma, ChatFormat::phi3,   ChatFormat::phi4,   ChatFormat::deepseek};
constexpr std::string_view kDeepSeekUser = "<\uFF5CUser\uFF5C>", kDeepSeekAssistant = "<\uFF5CAssistant\uFF5C>";

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

/// The plain format's assistant turn: "Assistant:" then the text, a space between them unless the
/// text starts with white space, so that a reply the model generated after "Assistant:" is sent
/// back as the same text (and tokens: the prompt cache continues that sequence).
std::string assistant_turn(const std::string& content) {
    const bool spaced = !content.empty() && (content[0] == ' ' || content[0] == '\n' || content[0] == '\t');
    return (spaced ? "Assistant:" : "Assistant: ") + content + "\n";
}

void check_roles(const std::vector<ChatMessage>& messages) {
    AQPIM_CHECK(!messages.empty(), "messages: at least one message is required");
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const std::string& r = messages[i].role;
        AQPIM_CHECK(r == "system" || r == "user" || r == "assistant",
                    "messages[{}].role: '{}' is not one of system, user, assistant", i, r);
        AQPIM_CHECK(r != "system" || i == 0, "messages[{}]: a system message must come first", i);
    }
}

/// [INST] formats: after an optional system message, user and assistant alternate, user last.
void check_alternating(const std::vector<ChatMessage>& messages, ChatFormat format) {
    const std::size_t first = messages[0].role == "system" ? 1 : 0;
    AQPIM_CHECK(first < messages.size(), "messages: the {} format needs a user message after the system one",
                chat_format_name(format));
    for (std::size_t i = first; i < messages.size(); ++i) {
        const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
        AQPIM_CHECK(messages[i].role == want, "messages[{}].role: the {} format alternates user and assistant, "
                    "expected '{}' here, got '{}'", i, chat_format_name(format), want, messages[i].role);
    }
    AQPIM_CHECK(messages.back().role == "user", "messages[{}]: the {} format needs the last message from the user",
                messages.size() - 1, chat_format_name(format));
}

std::string render_inst(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatTokens& t) {
    check_alternating(messages, format);
    const bool has_system = messages[0].role == "system";
    std::string out;
    for (std::size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "assistant") {
            out += (format == ChatFormat::llama2 ? " " : "") + m.content + (format == ChatFormat::llama2 ? " " : "") + t.eos;
            continue;
        }
        if (!out.empty()) out += format == ChatFormat::llama2 ? t.bos : "";
        out += "[INST] ";
        if (has_system && i == 1)
            out += format == ChatFormat::llama2 ? "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n"
                                                : messages[0].content + "\n\n";
        out += m.content + " [/INST]";
    }
    return out;
}

/// Gemma's reference template: no system turn (its text opens the first user turn), the
/// assistant is "model", each turn's text trimmed, turns alternating.
std::string render_gemma(const std::vector<ChatMessage>& messages) {
    check_alternating(messages, ChatFormat::gemma);
    const bool has_system = messages[0].role == "system";
    std::string out;
    for (std::size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n";
        if (has_system && i == 1) out += messages[0].content + "\n\n";
        out += std::string(trim_space(m.content)) + "<end_of_turn>\n";
    }
    return out + "<start_of_turn>model\n";
}

/// DeepSeek-R1's reference template: the system text first, then <｜User｜> and <｜Assistant｜>
/// turns, an assistant turn without its reasoning (what precedes its last </think>) and ended by EOS.
std::string render_deepseek(const std::vector<ChatMessage>& messages, const ChatTokens& t) {
    std::string out;
    for (const ChatMessage& m : messages) {
        if (m.role == "system") out += m.content;
        else if (m.role == "user") out += std::string(kDeepSeekUser) + m.content;
        else {
            const std::size_t think = m.content.rfind("</think>");
            out += std::string(kDeepSeekAssistant) + (think == std::string::npos ? m.content : m.content.substr(think + 8)) + t.eos;
        }
    }
    return out + std::string(kDeepSeekAssistant);
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
    switch (f) {
        case ChatFormat::plain: return "plain";
        case ChatFormat::llama2: return "llama2";
        case ChatFormat::llama3: return "llama3";
        case ChatFormat::chatml: return "chatml";
        case ChatFormat::mistral: return "mistral";
        case ChatFormat::gemma: return "gemma";
        case ChatFormat::phi3: return "phi3";
        case ChatFormat::phi4: return "phi4";
        case ChatFormat::deepseek: return "deepseek";
    }
    return "?";
}

ChatFormat parse_chat_format(std::string_view name) {
    for (ChatFormat f : kFormats)
        if (name == chat_format_name(f)) return f;
    throw Error(fmt::format("chat template '{}': expected plain, llama2, llama3, chatml, mistral, gemma, phi3, phi4 or deepseek", name));
}

ChatFormat detect_chat_format(std::string_view jinja) {
    if (contains(jinja, "<|im_sep|>")) return ChatFormat::phi4;
    if (contains(jinja, "<|im_start|>")) return ChatFormat::chatml;
    if (contains(jinja, kDeepSeekUser)) return ChatFormat::deepseek;
    if (contains(jinja, "<|start_header_id|>")) return ChatFormat::llama3;
    if (contains(jinja, "[INST]")) return contains(jinja, "<<SYS>>") ? ChatFormat::llama2 : ChatFormat::mistral;
    if (contains(jinja, "<start_of_turn>")) return ChatFormat::gemma;
    if (contains(jinja, "<|user|>") && contains(jinja, "<|end|>")) return ChatFormat::phi3;
    return ChatFormat::plain;
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatTokens& tokens) {
    check_roles(messages);
    std::string out;
    switch (format) {
        case ChatFormat::llama2:
        case ChatFormat::mistral: return render_inst(format, messages, tokens);
        case ChatFormat::llama3:
            for (const ChatMessage& m : messages)
                out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
            return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
        case ChatFormat::chatml:
            for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
            return out + "<|im_start|>assistant\n";
        case ChatFormat::phi4:
            for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "<|im_sep|>" + m.content + "<|im_end|>";
            return out + "<|im_start|>assistant<|im_sep|>";
        case ChatFormat::deepseek: return render_deepseek(messages, tokens);
        case ChatFormat::gemma: return render_gemma(messages);
        case ChatFormat::phi3:
            for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
            return out + "<|assistant|>\n";
        case ChatFormat::plain:
            for (const ChatMessage& m : messages) {
                if (m.role == "system") out += m.content + "\n\n";
                else if (m.role == "user") out += "User: " + m.content + "\n";
                else out += assistant_turn(m.content);
            }
            return out + "Assistant:";
    }
    return out;
}

std::vector<std::string> chat_stop_strings(ChatFormat format, const ChatTokens& tokens) {
    switch (format) {
        case ChatFormat::plain: return {"\nUser:"};
        case ChatFormat::llama3: return {"<|eot_id|>"};
        case ChatFormat::chatml:
        case ChatFormat::phi4: return {"<|im_end|>"};
        case ChatFormat::gemma: return {"<end_of_turn>"};
        case ChatFormat::phi3: return {"<|end|>"};
        case ChatFormat::llama2:
        case ChatFormat::mistral:
        case ChatFormat::deepseek: return tokens.eos.empty() ? std::vector<std::string>{} : std::vector<std::string>{tokens.eos};
    }
    return {};
}

}  // namespace aqpim::serve
