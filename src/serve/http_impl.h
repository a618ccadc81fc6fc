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

/// One request's way from the scheduler thread (on_event) to its connection's thread (poll, wait).
class Channel {
public:
    Channel(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::string> stops, std::int32_t prev_token,
            std::shared_ptr<Wakeup> wakeup)
        : text_(std::move(tokenizer), std::move(stops), prev_token), wakeup_(std::move(wakeup)) {}

    /// The engine's callback: text for the client; true once a stop string appeared.
    bool on_event(const TokenEvent& e);

    struct Final {
        FinishReason finish = FinishReason::none;
        bool stopped_by_text = false;
        int n_prompt = 0, n_generated = 0;
        std::string error;
    };
    /// Moves the text that arrived into `out` without waiting. True when finished (then `final` is filled).
    bool poll(std::vector<TextDelta>& out, Final& final);
    /// poll, waiting up to `timeout` for text or the end of this channel.
    bool wait(std::chrono::milliseconds timeout, std::vector<TextDelta>& out, Final& final);
    /// True the first time only: the connection's writer and its releaser may both see the client gone.
    bool first_to_see_gone() { return !gone_.exchange(true); }
    /// The prompt's scores (GenerationRequest::prompt_logprobs), once their event came.
    std::optional<std::vector<ScoredToken>> prompt_scores();

private:
    TextStream text_;  // scheduler thread only
    std::shared_ptr<Wakeup> wakeup_;
    std::mutex mu_;
    std::deque<TextDelta> deltas_;
    bool done_ = false;
    std::optional<std::vector<ScoredToken>> prompt_;
    Final final_;
    std::atomic<bool> gone_{false};
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
    void slot_action(const httplib::Request& req, httplib::Response& res);
    void count_disconnect();
    std::uint64_t draw_seed();
};

/// Answer with an OpenAI-style error object.
void send_error(httplib::Response& res, const ApiError& e);
/// Answer with a JSON body.
void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200);

}  // namespace aqpim::serve
