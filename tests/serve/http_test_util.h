#pragma once
// An `aqpim serve` in this test process on a loopback port: a synth model (the project's own
// random-weight GGUF with its spm vocabulary, generated once per process), the engine and the
// HTTP server on its own thread; and small HTTP helpers.

#include <httplib.h>

#include <csignal>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "aqpim/model.h"
#include "serve/engine.h"
#include "serve/engine_test_util.h"
#include "serve/http_server.h"
#include "support/cli.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace aqpim::test {

/// A 2-layer synth model (hidden 128, vocab 600, context 512), written once per process.
inline const LoadedModel& synth_serve_model() {
    static const LoadedModel m = [] {
        const std::string path = temp_path("serve_synth.gguf");
        const CliResult r = run_cli("synth --shape custom --hidden 128 --ffn 256 --heads 4 --kv-heads 2 --layers 2 "
                                    "--vocab 600 --ctx 512 --seed 5 -o " + path);
        if (r.exit_code != 0) throw std::runtime_error("synth failed: " + r.output);
        return load_model(path);
    }();
    return m;
}

/// A small engine: 4 slots of 512 tokens in 64 MiB, one thread.
inline serve::EngineOptions small_engine(const std::string& kv = "f16") {
    serve::EngineOptions o;
    o.kv = kv;
    o.kv_budget_bytes = 64ULL << 20;
    o.parallel = 4;
    o.ctx = 512;
    o.threads = 1;
    return o;
}

/// austen-13m from ../shared, loaded once per process.
inline const LoadedModel& austen_serve_model() {
    static const LoadedModel m = load_model(shared_path("models/austen-13m/austen-13m-f16.gguf"));
    return m;
}

/// The synth model with its last tokens made Qwen2.5-Coder's FIM tokens (<|fim_prefix|>,
/// <|fim_suffix|>, <|fim_middle|>), and with `repository` its <|repo_name|> and <|file_sep|> too.
inline LoadedModel fim_serve_model(bool repository = false) {
    LoadedModel m = synth_serve_model();
    VocabData v = m.tokenizer->vocab();
    std::vector<std::string> fim = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"};
    if (repository) fim.insert(fim.end(), {"<|repo_name|>", "<|file_sep|>"});
    const std::size_t first = v.tokens.size() - fim.size();
    for (std::size_t i = 0; i < fim.size(); ++i) {
        v.tokens[first + i] = fim[i];
        v.types[first + i] = TokenType::control;
    }
    m.tokenizer = Tokenizer::create(v);
    return m;
}

struct TestServer {
    std::unique_ptr<serve::Engine> engine;
    std::unique_ptr<serve::HttpServer> server;
    std::thread thread;
    int port = 0;

    TestServer(const LoadedModel& m, serve::EngineOptions eo, serve::ServerOptions so = {}) {
        std::signal(SIGPIPE, SIG_IGN);
        eo.eos_token = m.tokenizer->eos();
        so.port = 0;
        engine = std::make_unique<serve::Engine>(m.weights, eo);
        server = std::make_unique<serve::HttpServer>(*engine, m.tokenizer, m.weights.config, so);
        port = server->bind();
        thread = std::thread([this] { server->run(); });
    }
    ~TestServer() {
        server->stop();
        thread.join();
    }
    httplib::Client client(int timeout_s = 60) const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(timeout_s);
        c.set_write_timeout(timeout_s);
        return c;
    }
};

/// A /slots entry that holds no request's sequence: idle, or kept by the prompt cache.
inline bool slot_free(const nlohmann::json& slot) { return slot["state"] == "idle" || slot["state"] == "cached"; }

/// POST a JSON body; the response (status, body) or a test failure.
inline httplib::Result post_json(httplib::Client& c, const std::string& path, const nlohmann::json& body) {
    return c.Post(path.c_str(), body.dump(), "application/json");
}

/// POST a JSON body expecting `status`: the response's JSON (null after a test failure: no response).
inline nlohmann::json post(httplib::Client& c, const std::string& path, const nlohmann::json& body, int status = 200) {
    auto r = post_json(c, path, body);
    if (!r) {
        ADD_FAILURE() << path << ": no response";
        return nlohmann::json();
    }
    EXPECT_EQ(r->status, status) << r->body;
    return nlohmann::json::parse(r->body);
}

/// The data lines of a server-sent-event stream, in order ("[DONE]" included); comments skipped.
/// `framing_ok` is false if an event is not "data: ...\n\n".
inline std::vector<std::string> sse_data(const std::string& body, bool* framing_ok = nullptr) {
    std::vector<std::string> out;
    bool ok = true;
    std::size_t pos = 0;
    while (pos < body.size()) {
        const std::size_t end = body.find("\n\n", pos);
        if (end == std::string::npos) {
            ok = false;
            break;
        }
        const std::string event = body.substr(pos, end - pos);
        pos = end + 2;
        if (event.rfind(":", 0) == 0) continue;  // comment (keep-alive)
        if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) ok = false;
        out.push_back(event.substr(std::min<std::size_t>(6, event.size())));
    }
    if (framing_ok) *framing_ok = ok;
    return out;
}

/// POST a body given as text (so that the server reads its members in the written order): the
/// response's first choice (an empty object after a test failure).
inline nlohmann::json first_choice_of_text(httplib::Client& c, const std::string& path, const std::string& body) {
    auto r = c.Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return r && r->status == 200 ? nlohmann::json::parse(r->body)["choices"][0] : nlohmann::json::object();
}

/// A chat request's one choice as its streamed deltas built it: reasoning, content, tool calls (the
/// deltas' entries in order) and the finish reason; `reasoning_late` if a reasoning delta came
/// after content or calls (a test failure if the response is not a 200).
struct StreamedChat {
    std::string reasoning, content, finish;
    nlohmann::json tool_calls = nlohmann::json::array();
    bool reasoning_late = false;
};

inline StreamedChat stream_chat(httplib::Client& c, nlohmann::json body) {
    body["stream"] = true;
    auto r = post_json(c, "/v1/chat/completions", body);
    StreamedChat s;
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    if (!r) return s;
    for (const std::string& e : sse_data(r->body)) {
        if (e == "[DONE]") continue;
        const nlohmann::json chunk = nlohmann::json::parse(e);
        const nlohmann::json& choice = chunk["choices"][0];
        const nlohmann::json& delta = choice["delta"];
        if (delta.contains("reasoning_content")) {
            s.reasoning_late = s.reasoning_late || !s.content.empty() || !s.tool_calls.empty();
            s.reasoning += delta["reasoning_content"].get<std::string>();
        }
        s.content += delta.value("content", "");
        if (delta.contains("tool_calls"))
            for (const nlohmann::json& t : delta["tool_calls"]) s.tool_calls.push_back(t);
        if (!choice["finish_reason"].is_null()) s.finish = choice["finish_reason"];
    }
    return s;
}

/// A chat request streamed: its chunks' delta.content joined (a test failure if it is not a 200).
inline std::string streamed_chat_content(httplib::Client& c, nlohmann::json body) {
    body["stream"] = true;
    auto r = post_json(c, "/v1/chat/completions", body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    std::string content;
    if (r)
        for (const std::string& e : sse_data(r->body))
            if (e != "[DONE]") content += nlohmann::json::parse(e)["choices"][0]["delta"].value("content", "");
    return content;
}

}  // namespace aqpim::test
