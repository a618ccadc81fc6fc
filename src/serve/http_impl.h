#pragma once
// The server's state shared by its endpoint files (src/serve/http_*.cpp); not a public header.

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>

#include "serve/chat_template.h"
#include "serve/infill.h"
#include "serve/reasoning.h"
#include "serve/http_server.h"
#include "serve/json_constraint.h"
#include "serve/openai_request.h"
#include "serve/prometheus.h"
#include "serve/text_stream.h"

namespace aqpim::serve {

/// Wakes a connection's thread when any channel of its request got something: the generation
/// counts events, so a writer that reads it before looking at its channels never sleeps through one.
class Wakeup {
public:
    std::uint64_t generation();
    void notify();
    /// Wait until the generation differs from `seen` or `until` passes; false when it passed.
    bool wait_until(std::uint64_t seen, std::chrono::steady_clock::time_point until);

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::uint64_t generation_ = 0;
};

/// What ends a text besides stop strings (llama-server's /completion and /infill options).
struct TextLimits {
    int min_indent = 0;                     ///< n_indent (TextStream::set_min_indent); 0: off
    std::chrono::milliseconds max_predict{0};  ///< t_max_predict_ms: after this since the first token, stop at a new line; 0: off
};

/// One request's way from the scheduler thread (on_event) to its connection's thread (poll, wait).
class Channel {
public:
    /// `per_token`: each generated token makes its own delta holding that token whole, with the
    /// text released by it (maybe none), so a stop string's tokens are reported too (llama-server);
    /// otherwise a delta holds the tokens whose text it completes, cut at a stop string (OpenAI's).
    Channel(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::string> stops, std::int32_t prev_token,
            std::shared_ptr<Wakeup> wakeup, const TextLimits& limits = {}, bool per_token = false);

    /// The engine's callback: text for the client; true once a stop string appeared (or a TextLimits one).
    bool on_event(const TokenEvent& e);

    struct Final {
        FinishReason finish = FinishReason::none;
        bool stopped_by_text = false;   ///< a stop string, the indentation or the time ended it
        std::string stop_word;          ///< the stop string that ended it ("" if none did)
        bool stopped_by_limit = false;  ///< the indentation or the time (TextLimits) ended it
        int n_prompt = 0, n_generated = 0;
        std::string error;
        int slot = -1;                  ///< TokenEvent's slot, n_prompt_fed and prompt_seconds
        int n_prompt_fed = 0;
        double prompt_seconds = 0;
        double predicted_seconds = 0;   ///< from the first token to the end
    };
    /// Moves the text that arrived into `out` without waiting. True when finished (then `final` is filled).
    bool poll(std::vector<TextDelta>& out, Final& final);
    /// poll, waiting up to `timeout` for text or the end of this channel.
    bool wait(std::chrono::milliseconds timeout, std::vector<TextDelta>& out, Final& final);
    /// True the first time only: the connection's writer and its releaser may both see the client gone.
    bool first_to_see_gone() { return !gone_.exchange(true); }
    /// The prompt's scores (GenerationRequest::prompt_logprobs), once their event came.
    std::optional<std::vector<ScoredToken>> prompt_scores();
    /// Where the request stands once its first token came (a stream's timings_per_token).
    struct Progress {
        int slot = -1;
        int n_prompt_fed = 0;
        double prompt_seconds = 0;
        double predicted_seconds = 0;  ///< from the first token to now
    };
    std::optional<Progress> progress();

private:
    TextStream text_;  // scheduler thread only
    std::shared_ptr<const Tokenizer> tokenizer_;
    std::int32_t prev_token_;  // scheduler thread only: per_token's leading-space rule
    bool per_token_;
    std::shared_ptr<Wakeup> wakeup_;
    std::chrono::milliseconds max_predict_;
    std::chrono::steady_clock::time_point first_token_;  // written before started_ is set
    bool saw_new_line_ = false;                          // scheduler thread only
    std::optional<Progress> started_;                    // under mu_: from the first token on
    bool stopped_by_time_ = false;
    std::mutex mu_;
    std::deque<TextDelta> deltas_;
    bool done_ = false;
    std::optional<std::vector<ScoredToken>> prompt_;
    Final final_;
    std::atomic<bool> gone_{false};
};

/// One prompt of a request on its way through the engine (a choice of the response).
struct Choice {
    std::vector<std::int32_t> prompt;
    std::shared_ptr<Channel> channel;
    std::uint64_t request_id = 0;
    std::vector<TokenText> echoed;  ///< echo: the prompt's tokens with their texts (scores added at the end)
    std::string echo_text;          ///< their texts, concatenated
};

/// What a request's choices share besides their prompts and its parameters.
struct ChoiceSettings {
    std::vector<std::string> stops;                        ///< stop strings
    std::vector<std::vector<std::int32_t>> stop_sequences;  ///< GenerationRequest::stop_sequences
    ReasoningStart reasoning = ReasoningStart::closed;
    TextLimits limits;
    bool per_token = false;  ///< Channel's per_token
};

/// httplib::Server with a listen backlog fit for many clients: the library's is 5 (a compile-time
/// constant of the Debian build), so a burst of 64 connections overflowed the accept queue and
/// clients saw reset connections. listen() again on the bound socket sets a new backlog.
class BackloggedServer : public httplib::Server {
public:
    void set_backlog(int n);
};

struct HttpServer::Impl {
    Impl(Engine& e, std::shared_ptr<const Tokenizer> t, const ModelConfig& c, ServerOptions o);

    Engine& engine;
    std::shared_ptr<const Tokenizer> tokenizer;
    ModelConfig config;
    ServerOptions options;
    ChatFormat chat_format = ChatFormat::plain;
    ReasoningFormat reasoning_format = ReasoningFormat::none;
    bool template_opens_reasoning = false;  ///< the model's template ends its generation prompt with <think>
    std::optional<FimTokens> fim;  ///< the model's fill-in-the-middle tokens (suffix), if it has them
    ChatTokens chat_tokens;
    std::vector<std::string> chat_turn_end;                     ///< chat_stop_strings of the format
    std::vector<std::vector<std::int32_t>> chat_turn_end_tokens; ///< those that are one control token
    std::shared_ptr<const GuideVocabulary> guide_vocabulary;  ///< the output constraints' token texts
    RequestLimits limits;
    std::int64_t n_ctx = 0;          ///< tokens one sequence holds
    std::int64_t started = 0;        ///< unix seconds
    std::string id_prefix;           ///< random per process: ids differ across restarts
    std::atomic<std::uint64_t> next_response{1};

    BackloggedServer http;
    std::mutex counters_mu;
    HttpCounters counters;
    std::mutex seed_mu;
    std::mt19937_64 seed_rng;

    void routes();
    void tokenizer_routes();  ///< http_tokenize.cpp
    void completion(const httplib::Request& req, httplib::Response& res, bool chat);
    /// A chat request's prompt text: its messages in the chat format, and the reasoning format's end
    /// of the prompt (what POST /apply-template answers). Throws ApiError 400 naming `messages`.
    std::string chat_prompt(const CompletionParams& p) const;
    /// llama-server's own /completion (and /completions) and /infill (http_llama_completion.cpp).
    void llama_completion(const httplib::Request& req, httplib::Response& res, bool infill);
    /// Submit each choice (p.best_of per prompt, consecutive) as a request of the engine, all or
    /// none, with its channel; fills their request ids. Returns the wakeup all their channels
    /// notify. Throws ApiError when they are refused.
    std::shared_ptr<Wakeup> submit_choices(const CompletionParams& p, std::vector<Choice>& choices, const ChoiceSettings& settings);
    void slot_action(const httplib::Request& req, httplib::Response& res);
    void count_disconnect();
    /// Cancel every choice still running (each once); true when one was.
    bool cancel_choices(const std::vector<Choice>& choices);
    /// The client went away: its choices cancelled and counted once; false (a content provider's "stop").
    bool client_gone(const std::vector<Choice>& choices);
    std::uint64_t draw_seed();
};

/// A choice's whole text and tokens, waited for; while nothing comes a space goes out every second
/// (JSON allows leading whitespace), which notices a client that went away: then false.
bool read_whole_choice(Channel& channel, httplib::DataSink& sink, std::string& text, std::vector<TokenText>& tokens,
                       Channel::Final& fin);

/// Write a response's last bytes and end it; false when the client is gone.
bool write_last(httplib::DataSink& sink, const std::string& s);
/// A server-sent-event response (no caching) whose events `provider` writes.
void start_event_stream(httplib::Response& res, httplib::ContentProviderWithoutLength provider,
                        httplib::ContentProviderResourceReleaser release);

/// Answer with an OpenAI-style error object.
void send_error(httplib::Response& res, const ApiError& e);
/// Answer with a JSON body.
void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200);

}  // namespace aqpim::serve
