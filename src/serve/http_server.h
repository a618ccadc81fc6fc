#pragma once
// `aqpim serve`'s HTTP layer (docs/serve.md): OpenAI-compatible endpoints over the serving engine,
// on cpp-httplib. /v1/completions and /v1/chat/completions (whole or streamed as server-sent
// events), /v1/models, /health, /metrics (Prometheus), /slots (and save/restore/erase of a slot).

#include <cstdint>
#include <memory>
#include <string>

#include "aqpim/model.h"
#include "aqpim/tokenizer.h"
#include "serve/engine.h"

namespace aqpim::serve {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                       ///< 0: any free port (bind() returns it)
    std::string model_alias;               ///< the model's id in /v1/models and responses
    std::string chat_template;             ///< a chat_format_name (chat_template.h); "": from the model
    std::string reasoning_format = "auto"; ///< auto, none or deepseek (reasoning.h)
    /// llama-server's --reasoning-budget: -1 reasoning as the model likes, 0 none (a chat request
    /// without chat_template_kwargs.enable_thinking answers with an empty reasoning).
    int reasoning_budget = -1;
    std::string slot_save_path;            ///< directory of slot files; "": save/restore disabled
    std::string api_key;                   ///< "": no authentication; else Authorization: Bearer KEY
    std::size_t max_body_bytes = 1 << 20;  ///< larger request bodies: 413
    int http_threads = 0;                  ///< connection threads (0: parallel + queue + 8, at most 1024)
    int timeout_seconds = 30;              ///< socket read and write timeout
    int default_max_tokens = 512;          ///< a chat request without max_tokens (completions: 16, as OpenAI)

    /// Throws aqpim::Error naming the first bad field.
    void validate() const;
};

class HttpServer {
public:
    /// `engine` and `tokenizer` must outlive the server.
    HttpServer(Engine& engine, std::shared_ptr<const Tokenizer> tokenizer, const ModelConfig& config,
               ServerOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    /// Bind host:port; returns the port (the chosen one for port 0). aqpim::Error if it cannot.
    int bind();
    /// Serve until stop() (from another thread or a signal handler's thread).
    void run();
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace aqpim::serve
