// The tokenizer's endpoints (docs/serve.md, "Tokenizer endpoints"): POST /tokenize and
// /detokenize with vLLM's and llama-server's field names, GET /tokenizer_info as vLLM answers it
// (what lm-evaluation-harness's remote tokenizer reads), and llama-server's POST /apply-template
// (a chat request's prompt text).

#include <fmt/format.h>

#include "serve/http_impl.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;

namespace {

json token_text_or_null(const Tokenizer& t, std::int32_t id) {
    return id >= 0 && id < t.n_vocab() ? json(t.vocab().tokens[std::size_t(id)]) : json(nullptr);
}

}  // namespace

void HttpServer::Impl::tokenizer_routes() {
    using httplib::Request;
    using httplib::Response;
    http.Post("/tokenize", [this](const Request& req, Response& res) {
        const TokenizeParams p = parse_tokenize_request(parse_request_json(req.body));
        const std::vector<std::int32_t> ids = tokenizer->encode(p.text, p.add_special);
        if (!p.with_pieces) return send_json(res, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", n_ctx}});
        // llama-server's pieces, a piece that is not UTF-8 as its bytes; written as text, not as a
        // JSON object per token (a 1 MB body is some 300,000 tokens).
        const VocabData& v = tokenizer->vocab();
        std::string body = "{\"tokens\":[";
        for (std::size_t i = 0; i < ids.size(); ++i) {
            const std::size_t id = std::size_t(ids[i]);
            const std::string& piece = id < v.types.size() && v.types[id] == TokenType::control ? v.tokens[id] : guide_vocabulary->text(ids[i]);
            body += fmt::format("{}{{\"id\":{},\"piece\":", i ? "," : "", id);
            if (valid_utf8(piece) == piece) {
                body += dump_json(piece);
            } else {
                body += '[';
                for (std::size_t k = 0; k < piece.size(); ++k) body += fmt::format("{}{}", k ? "," : "", static_cast<unsigned char>(piece[k]));
                body += ']';
            }
            body += '}';
        }
        body += fmt::format("],\"count\":{},\"max_model_len\":{}}}", ids.size(), n_ctx);
        res.set_content(body, "application/json");
    });
    http.Post("/detokenize", [this](const Request& req, Response& res) {
        const std::string text = tokenizer->decode(parse_detokenize_request(parse_request_json(req.body), limits));
        send_json(res, {{"prompt", text}, {"content", text}});
    });
    http.Post("/apply-template", [this](const Request& req, Response& res) {
        const CompletionParams p = parse_completion_request(parse_request_json(req.body), true, limits, req.body);
        send_json(res, {{"prompt", chat_prompt(p)}});
    });
    http.Get("/tokenizer_info", [this](const Request&, Response& res) {
        const VocabData& v = tokenizer->vocab();
        json info = {{"tokenizer_class", v.kind == VocabKind::spm ? "spm" : "bpe"},
                     {"bos_token", token_text_or_null(*tokenizer, v.bos)},
                     {"eos_token", token_text_or_null(*tokenizer, v.eos)},
                     {"pad_token", token_text_or_null(*tokenizer, v.pad)},
                     {"unk_token", token_text_or_null(*tokenizer, v.unk)},
                     {"add_bos_token", v.add_bos},
                     {"model_max_length", n_ctx},
                     {"vocab_size", tokenizer->n_vocab()}};
        if (!v.chat_template.empty()) info["chat_template"] = v.chat_template;
        send_json(res, info);
    });
}

}  // namespace aqpim::serve
