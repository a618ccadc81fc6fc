// The tokenizer's endpoints (docs/serve.md, "Tokenizer endpoints"): POST /tokenize and
// /detokenize with vLLM's and llama-server's field names, GET /tokenizer_info as vLLM answers it
// (what lm-evaluation-harness's remote tokenizer reads), and llama-server's POST /apply-template
// (a chat request's prompt text).

#include "serve/http_impl.h"

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
        json tokens = ids;
        if (p.with_pieces) {  // llama-server's: a piece that is not UTF-8 as its bytes
            tokens = json::array();
            const VocabData& v = tokenizer->vocab();
            for (const std::int32_t id : ids) {
                const std::string& piece = std::size_t(id) < v.types.size() && v.types[std::size_t(id)] == TokenType::control ? v.tokens[std::size_t(id)] : guide_vocabulary->text(id);
                json bytes = json::array();
                for (const char b : piece) bytes.push_back(static_cast<unsigned char>(b));
                tokens.push_back({{"id", id}, {"piece", valid_utf8(piece) == piece ? json(piece) : bytes}});
            }
        }
        send_json(res, {{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", n_ctx}});
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
