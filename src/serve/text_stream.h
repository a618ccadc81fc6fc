#pragma once
// Generated tokens to the text a client sees (docs/serve.md, "Text, stops and logprobs"): each
// token's piece is appended, and text is released only when it can no longer change: a tail that
// could still become one of the stop strings, or an incomplete UTF-8 character (byte tokens), is
// held back. When a stop string appears, the text before it is released, the rest (the stop
// string included, as OpenAI's API does) is dropped and the stream is over. Released text and
// token texts are valid UTF-8 (valid_utf8).

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/tokenizer.h"
#include "serve/engine.h"

namespace aqpim::serve {

/// One generated token with its text (logprobs of /v1/completions and chat).
struct TokenText {
    std::int32_t token = -1;
    std::string text;  ///< its piece (cut at a stop string)
    float logprob = 0.0f;
    std::vector<TokenLogprob> top;
    bool scored = true;  ///< false: an echoed prompt token nothing predicted (logprob and top are null)
    std::int32_t prev = -1;  ///< the token before it: its alternatives' text follows the same leading-space rule
};

/// Text released by one step and the tokens whose last byte it contains.
struct TextDelta {
    std::string text;
    std::vector<TokenText> tokens;
    bool empty() const { return text.empty() && tokens.empty(); }
};

class TextStream {
public:
    /// `prev_token`: the token before the first generated one (the prompt's last; -1 if none), for
    /// the tokenizer's leading-space rule. Empty stop strings are ignored.
    TextStream(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::string> stops, std::int32_t prev_token);

    /// Append a generated token (event.finish == none). Returns what can be sent now; after a stop
    /// string appeared, stopped() is true and later pushes return nothing.
    TextDelta push(const TokenEvent& event);
    /// The end of generation: everything still held back.
    TextDelta flush();
    bool stopped() const { return stopped_; }
    /// The stop string that stopped it ("" when none did: not stopped, or stopped by the indentation).
    const std::string& stop_word() const { return stop_word_; }

    /// llama-server's n_indent (its /infill): a line that starts in the generated text and whose
    /// first character other than a space or tab (its new line, if it is blank) comes after fewer
    /// than n spaces and tabs stops the text before that character (the line's indentation is
    /// kept). 0: off.
    void set_min_indent(int n) { min_indent_ = n; }
    /// Whether the indentation stopped it.
    bool stopped_by_indent() const { return indent_stop_; }

private:
    TextDelta release(std::size_t n_bytes);
    std::size_t held_bytes() const;  ///< tail of pending_ that must wait

    std::shared_ptr<const Tokenizer> tokenizer_;
    std::vector<std::string> stops_;
    std::int32_t prev_ = -1;
    std::string pending_;                ///< text not yet released
    struct Pending {
        TokenText token;
        std::size_t unreleased = 0;      ///< bytes of its text still in pending_
    };
    std::deque<Pending> pending_tokens_;
    bool stopped_ = false;
    std::string stop_word_;
    int min_indent_ = 0;
    bool at_line_start_ = false;  ///< min_indent_: after a new line of the generated text, only spaces and tabs since
    int indent_ = 0;              ///< those spaces and tabs
    bool indent_stop_ = false;    ///< the indentation stopped it

    /// min_indent_: where in t (the token's text) a line breaks the indentation rule, or npos.
    std::size_t indent_break(std::string_view t);
};

/// Bytes at the end of `text` that start a UTF-8 character not yet complete (0..3).
std::size_t incomplete_utf8_tail(std::string_view text);
/// `text` with each byte that is not part of a valid UTF-8 character (a random-weight model's byte
/// tokens, a character cut by a stop) replaced by U+FFFD, so what is sent, counted in text_offset
/// and compared is the same text.
std::string valid_utf8(std::string_view text);

}  // namespace aqpim::serve
