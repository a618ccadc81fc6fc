// `aqpim serve`: routing, authentication, errors, and the endpoints other than completions
// (docs/serve.md).

#include "serve/http_impl.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>

#include <sys/socket.h>

#include "aqpim/error.h"
#include "aqpim/timer.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;

namespace {
constexpr int kListenBacklog = 1024;  ///< connections the kernel holds before accept (capped by somaxconn)
}

void ServerOptions::validate() const {
    AQPIM_CHECK(port >= 0 && port <= 65535, "serve: --port {} outside [0, 65535]", port);
    AQPIM_CHECK(!host.empty(), "serve: --host is empty");
    AQPIM_CHECK(max_body_bytes >= 1024, "serve: --max-body {} bytes is below 1024", max_body_bytes);
    AQPIM_CHECK(http_threads >= 0 && http_threads <= 4096, "serve: --threads-http {} outside [0, 4096]", http_threads);
    AQPIM_CHECK(timeout_seconds >= 1 && timeout_seconds <= 3600, "serve: --timeout {} s outside [1, 3600]",
                timeout_seconds);
    AQPIM_CHECK(default_max_tokens >= 1, "serve: --n-predict {} must be >= 1", default_max_tokens);
    if (!chat_template.empty()) (void)parse_chat_format(chat_template);
    (void)parse_reasoning_format(reasoning_format, "", false);
    AQPIM_CHECK(reasoning_budget == -1 || reasoning_budget == 0,
                "serve: --reasoning-budget {}: expected -1 (unrestricted) or 0 (no reasoning)", reasoning_budget);
    if (!slot_save_path.empty())
        AQPIM_CHECK(std::filesystem::is_directory(slot_save_path), "serve: --slot-save-path '{}' is not a directory",
                    slot_save_path);
}

void send_json(httplib::Response& res, const json& j, int status) {
    res.status = status;
    res.set_content(dump_json(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
    if (e.status() == 503) res.set_header("Retry-After", "1");
    send_json(res, e.to_json(), e.status());
}

HttpServer::Impl::Impl(Engine& e, std::shared_ptr<const Tokenizer> t, const ModelConfig& c, ServerOptions o)
    : engine(e), tokenizer(std::move(t)), config(c), options(std::move(o)), seed_rng(std::random_device{}()) {
    AQPIM_CHECK(tokenizer, "serve: the model has no vocabulary (give --tokenizer)");
    options.validate();
    chat_format = options.chat_template.empty() ? detect_chat_format(tokenizer->vocab().chat_template)
                                                : parse_chat_format(options.chat_template);
    fim = find_fim_tokens(tokenizer->vocab());
    reasoning_format = parse_reasoning_format(options.reasoning_format, tokenizer->vocab().chat_template,
                                              chat_format == ChatFormat::deepseek);
    template_opens_reasoning = serve::template_opens_reasoning(tokenizer->vocab().chat_template);
    const auto& v = tokenizer->vocab();
    if (v.bos >= 0) chat_tokens.bos = v.tokens[std::size_t(v.bos)];
    if (v.eos >= 0) chat_tokens.eos = v.tokens[std::size_t(v.eos)];
    chat_turn_end = chat_stop_strings(chat_format, chat_tokens);
    // A marker that is one control token is stopped on as a token: control tokens print as "", so a
    // string stop cannot see them.
    for (const std::string& t : chat_turn_end) {
        const auto ids = tokenizer->encode(t, false);
        if (ids.size() == 1 && v.types[std::size_t(ids[0])] == TokenType::control) chat_turn_end_tokens.push_back(ids);
    }
    // JSON mode's texts: each token as it reads after an ordinary token (its leading space kept).
    const auto normal = std::find(v.types.begin(), v.types.end(), TokenType::normal);
    const std::int32_t after = normal == v.types.end() ? -1 : std::int32_t(normal - v.types.begin());
    std::vector<std::string> texts;
    for (std::int32_t t = 0; t < tokenizer->n_vocab(); ++t) texts.push_back(tokenizer->piece(after, t));
    guide_vocabulary = std::make_shared<const GuideVocabulary>(std::move(texts), v.eos);
    limits.n_vocab = tokenizer->n_vocab();
    n_ctx = engine.options().ctx > 0 ? engine.options().ctx : config.n_ctx_train;
    started = std::int64_t(std::time(nullptr));
    id_prefix = fmt::format("{:08x}", std::uint32_t(seed_rng()));
    if (options.model_alias.empty()) options.model_alias = config.name.empty() ? "aqpim" : config.name;
}

std::uint64_t HttpServer::Impl::draw_seed() {
    std::lock_guard<std::mutex> lk(seed_mu);
    return seed_rng();
}

void HttpServer::Impl::count_disconnect() {
    std::lock_guard<std::mutex> lk(counters_mu);
    ++counters.disconnects;
}

bool HttpServer::Impl::cancel_choices(const std::vector<Choice>& choices) {
    bool cancelled = false;
    for (const Choice& c : choices)
        if (c.channel->first_to_see_gone() && engine.cancel(c.request_id)) cancelled = true;
    return cancelled;
}

bool HttpServer::Impl::client_gone(const std::vector<Choice>& choices) {
    if (cancel_choices(choices)) count_disconnect();  // one client
    return false;
}


namespace {

json slot_json(const SlotInfo& s, std::int64_t n_ctx) {
    return {{"id", s.id}, {"state", slot_phase_name(s.phase)}, {"id_task", s.request_id}, {"n_ctx", n_ctx},
            {"n_prompt", s.n_prompt}, {"n_generated", s.n_generated}, {"max_tokens", s.max_tokens},
            {"n_cached", s.n_cached}, {"kv_bytes_reserved", s.kv_bytes_reserved}};
}

/// A slot file's name: letters, digits, '.', '_', '-', not starting with '.', at most 128 bytes.
std::string checked_filename(const std::string& name) {
    bool ok = !name.empty() && name.size() <= 128 && name[0] != '.';
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
    if (!ok)
        throw ApiError(400, fmt::format("filename '{}': use 1-128 letters, digits, '.', '_' or '-', not starting with '.'",
                                        name.substr(0, 200)), "filename");
    return name;
}

}  // namespace

void HttpServer::Impl::slot_action(const httplib::Request& req, httplib::Response& res) {
    const std::string id_text = req.matches[1];
    int id = -1;
    try {
        std::size_t used = 0;
        id = std::stoi(id_text, &used);
        if (used != id_text.size()) id = -1;
    } catch (const std::exception&) {
    }
    if (id < 0 || id >= engine.options().parallel)
        throw ApiError(400, fmt::format("slot '{}': expected an id in [0, {})", id_text.substr(0, 40),
                                        engine.options().parallel), "id_slot");
    const std::string action = req.get_param_value("action");
    Timer timer;
    if (action == "erase") {
        std::int64_t n = 0;
        for (const SlotInfo& s : engine.slots())
            if (s.id == id) n = s.n_cached;
        try {
            engine.release_slot(id);
        } catch (const Error& e) {
            throw ApiError(400, e.what(), "id_slot");
        }
        return send_json(res, {{"id_slot", id}, {"n_erased", n}});
    }
    if (action != "save" && action != "restore")
        throw ApiError(400, fmt::format("action '{}': expected save, restore or erase", action.substr(0, 40)), "action");
    if (options.slot_save_path.empty())
        throw ApiError(400, "slot save and restore are disabled: start the server with --slot-save-path DIR");
    // `?filename=F`, or llama-server's body `{"filename": F}`.
    std::string name = req.get_param_value("filename");
    if (!req.has_param("filename") && !req.body.empty()) {
        const json body = parse_request_json(req.body);
        const json* f = body.is_object() && body.contains("filename") ? &body["filename"] : nullptr;
        if (!f || !f->is_string()) throw ApiError(400, "filename: give it as ?filename=F or in the body as {\"filename\": F}", "filename");
        name = f->get<std::string>();
    }
    const std::string filename = checked_filename(name);
    const std::string path = (std::filesystem::path(options.slot_save_path) / filename).string();
    try {
        if (action == "save") engine.save_slot(id, path);
        else engine.restore_slot(id, path);
    } catch (const Error& e) {
        throw ApiError(400, e.what(), action == "save" ? "id_slot" : "filename");
    }
    std::int64_t n_tokens = 0;
    for (const SlotInfo& s : engine.slots())
        if (s.id == id) n_tokens = s.n_cached;
    std::error_code ec;
    const auto bytes = std::int64_t(std::filesystem::file_size(path, ec));
    const double ms = timer.seconds() * 1e3;
    if (action == "save")
        return send_json(res, {{"id_slot", id}, {"filename", filename}, {"n_saved", n_tokens}, {"n_written", bytes},
                               {"timings", {{"save_ms", ms}}}});
    send_json(res, {{"id_slot", id}, {"filename", filename}, {"n_restored", n_tokens}, {"n_read", bytes},
                    {"timings", {{"restore_ms", ms}}}});
}

void HttpServer::Impl::routes() {
    using httplib::Request;
    using httplib::Response;
    http.set_pre_routing_handler([this](const Request& req, Response& res) {
        if (options.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
        if (req.get_header_value("Authorization") == "Bearer " + options.api_key)
            return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)"));
        return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
        if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
        const std::string what = res.status == 404 ? fmt::format("no endpoint {} {}", req.method, req.path.substr(0, 200))
                               : res.status == 413 ? fmt::format("request body larger than {} bytes", options.max_body_bytes)
                               : fmt::format("HTTP {}", res.status);
        send_error(res, ApiError(res.status, what));
        return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
        try {
            std::rethrow_exception(ep);
        } catch (const ApiError& e) {
            send_error(res, e);
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, e.what()));
        } catch (...) {
            send_error(res, ApiError(500, "unknown error"));
        }
    });
    http.set_logger([this](const Request&, const Response& res) {
        std::lock_guard<std::mutex> lk(counters_mu);
        ++counters.responses_by_status[res.status];
    });

    http.Get("/health", [this](const Request&, Response& res) {
        int busy = 0;
        for (const SlotInfo& s : engine.slots()) busy += s.phase != SlotPhase::idle && s.phase != SlotPhase::cached;
        send_json(res, {{"status", "ok"}, {"slots_idle", engine.options().parallel - busy}, {"slots_processing", busy}});
    });
    http.Get("/v1/models", [this](const Request&, Response& res) {
        const EngineOptions& eo = engine.options();
        json meta = {{"n_ctx", n_ctx}, {"n_vocab", config.n_vocab}, {"n_params", config.n_params()},
                     {"kv", eo.kv}, {"kv_budget_bytes", eo.kv_budget_bytes}, {"parallel", eo.parallel},
                     {"chat_template", chat_format_name(chat_format)}, {"reasoning_format", reasoning_format_name(reasoning_format)}};
        send_json(res, {{"object", "list"},
                        {"data", json::array({{{"id", options.model_alias}, {"object", "model"}, {"created", started},
                                               {"owned_by", "aqpim"}, {"meta", meta}}})}});
    });
    // llama-server's properties, as its web UI and clients read them at start.
    http.Get("/props", [this](const Request&, Response& res) {
        const EngineOptions& eo = engine.options();
        send_json(res, {{"default_generation_settings",
                         {{"n_ctx", n_ctx}, {"params", {{"n_predict", options.default_max_tokens}, {"temperature", 1.0}, {"top_p", 1.0},
                                                        {"top_k", 0}, {"min_p", 0.0}, {"seed", -1}}}}},
                        {"total_slots", eo.parallel}, {"model_path", options.model_alias}, {"model_alias", options.model_alias},
                        {"chat_template", tokenizer->vocab().chat_template}, {"modalities", {{"vision", false}, {"audio", false}}},
                        {"build_info", "aqpim"}, {"kv", eo.kv}, {"kv_budget_bytes", eo.kv_budget_bytes}});
    });
    http.Get("/metrics", [this](const Request&, Response& res) {
        HttpCounters c;
        {
            std::lock_guard<std::mutex> lk(counters_mu);
            c = counters;
        }
        res.set_content(prometheus_text(engine.stats(), c), "text/plain; version=0.0.4");
    });
    http.Get("/slots", [this](const Request&, Response& res) {
        json a = json::array();
        for (const SlotInfo& s : engine.slots()) a.push_back(slot_json(s, n_ctx));
        send_json(res, a);
    });
    http.Post(R"(/slots/([^/]+))", [this](const Request& req, Response& res) { slot_action(req, res); });
    http.Post("/v1/completions", [this](const Request& req, Response& res) { completion(req, res, false); });
    http.Post("/v1/chat/completions", [this](const Request& req, Response& res) { completion(req, res, true); });
    // llama-server's own formats (its /completions is the same as /completion, not OpenAI's).
    for (const char* path : {"/completion", "/completions"})
        http.Post(path, [this](const Request& req, Response& res) { llama_completion(req, res, false); });
    http.Post("/infill", [this](const Request& req, Response& res) { llama_completion(req, res, true); });
    tokenizer_routes();
}

HttpServer::HttpServer(Engine& engine, std::shared_ptr<const Tokenizer> tokenizer, const ModelConfig& config,
                       ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(tokenizer), config, std::move(options))) {
    Impl& s = *impl_;
    const EngineOptions& eo = engine.options();
    const int threads = s.options.http_threads > 0 ? s.options.http_threads
                                                   : std::min(1024, eo.parallel + eo.queue_capacity + 8);
    s.http.new_task_queue = [threads] { return new httplib::ThreadPool(std::size_t(threads)); };
    s.http.set_payload_max_length(s.options.max_body_bytes);
    s.http.set_read_timeout(s.options.timeout_seconds);
    s.http.set_write_timeout(s.options.timeout_seconds);
    s.routes();
}

HttpServer::~HttpServer() { stop(); }

void BackloggedServer::set_backlog(int n) {
    AQPIM_CHECK(::listen(svr_sock_, n) == 0, "serve: cannot set the listen backlog to {}", n);
}

int HttpServer::bind() {
    Impl& s = *impl_;
    if (s.options.port == 0) {
        const int port = s.http.bind_to_any_port(s.options.host);
        AQPIM_CHECK(port > 0, "serve: cannot bind to {} (any port)", s.options.host);
        s.http.set_backlog(kListenBacklog);
        return port;
    }
    AQPIM_CHECK(s.http.bind_to_port(s.options.host, s.options.port), "serve: cannot bind to {}:{} (in use?)",
                s.options.host, s.options.port);
    s.http.set_backlog(kListenBacklog);
    return s.options.port;
}

void HttpServer::run() { impl_->http.listen_after_bind(); }

void HttpServer::stop() {
    if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace aqpim::serve
