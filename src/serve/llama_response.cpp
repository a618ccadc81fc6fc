#include "serve/llama_response.h"

#include <limits>

#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;

json llama_timings_json(const LlamaTimings& t) {
    const double prompt_ms = t.prompt_seconds * 1e3, predicted_ms = t.predicted_seconds * 1e3;
    const auto per = [](double ms, int n) { return n > 0 ? ms / n : 0.0; };
    const auto rate = [](double ms, int n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
    return {{"prompt_n", t.prompt_n},
            {"prompt_ms", prompt_ms},
            {"prompt_per_token_ms", per(prompt_ms, t.prompt_n)},
            {"prompt_per_second", rate(prompt_ms, t.prompt_n)},
            {"predicted_n", t.predicted_n},
            {"predicted_ms", predicted_ms},
            {"predicted_per_token_ms", per(predicted_ms, t.predicted_n)},
            {"predicted_per_second", rate(predicted_ms, t.predicted_n)}};
}

namespace {

json token_json(std::int32_t id, const std::string& text, float logprob) {
    std::vector<unsigned> bytes(text.begin(), text.end());
    for (unsigned& b : bytes) b &= 0xFF;
    return {{"id", id}, {"token", valid_utf8(text)}, {"bytes", bytes}, {"logprob", logprob}};
}

}  // namespace

json llama_probs_json(const std::vector<TokenText>& tokens, const std::function<std::string(std::int32_t, std::int32_t)>& piece) {
    json out = json::array();
    for (const TokenText& t : tokens) {
        json top = json::array();
        for (const TokenLogprob& alt : t.top) top.push_back(token_json(alt.token, piece(t.prev, alt.token), alt.logprob));
        json entry = token_json(t.token, t.text, t.logprob);
        entry["top_logprobs"] = std::move(top);
        out.push_back(std::move(entry));
    }
    return out;
}

std::vector<std::int32_t> token_ids_of(const std::vector<TokenText>& tokens) {
    std::vector<std::int32_t> ids;
    ids.reserve(tokens.size());
    for (const TokenText& t : tokens) ids.push_back(t.token);
    return ids;
}

json llama_result_json(const LlamaResult& r) {
    return {{"index", r.index},
            {"content", r.content},
            {"tokens", r.tokens},
            {"id_slot", r.id_slot},
            {"stop", true},
            {"model", r.model},
            {"tokens_predicted", r.timings.predicted_n},
            {"tokens_evaluated", r.tokens_evaluated},
            {"generation_settings", r.generation_settings},
            {"prompt", r.prompt},
            {"has_new_line", r.has_new_line},
            {"truncated", false},
            {"stop_type", r.stop.type},
            {"stopping_word", r.stop.word},
            {"tokens_cached", r.tokens_cached},
            {"timings", llama_timings_json(r.timings)}};
}

json select_fields(const json& j, const std::vector<std::string>& paths) {
    if (paths.empty()) return j;
    json out = json::object();
    for (const std::string& path : paths) {
        const json* at = &j;
        for (std::size_t from = 0; at && from <= path.size();) {
            const std::size_t slash = std::min(path.find('/', from), path.size());
            const std::string key = path.substr(from, slash - from);
            const auto it = at->is_object() ? at->find(key) : at->end();
            at = at->is_object() && it != at->end() ? &*it : nullptr;
            from = slash + 1;
        }
        if (at) out[path] = *at;
    }
    return out;
}

std::string sse_error_event(const json& error) {
    return "error: " + dump_json(error) + "\n\n";
}

}  // namespace aqpim::serve
