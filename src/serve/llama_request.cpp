#include "serve/llama_request.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aqpim/file_io.h"

namespace aqpim::serve {

using nlohmann::json;
using namespace fields;

namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<std::int32_t>::max();

/// llama-server's samplers in the order its chain applies them (and aqpim's processing does).
/// (llama-server's default chain has no infill sampler; a list may put it after the others, before
/// the temperature.)
enum class Sampler : std::uint8_t { penalties, dry, top_k, typ_p, top_p, min_p, xtc, infill, temperature };
constexpr std::array<const char*, 9> kSamplerNames = {"penalties", "dry",  "top_k", "typ_p",      "top_p",
                                                      "min_p",     "xtc",  "infill", "temperature"};

/// A sampler's name or one-letter code (llama.cpp's names and aliases); nullopt: unknown.
std::optional<Sampler> sampler_named(const std::string& name) {
    static const std::vector<std::pair<std::string, Sampler>> kNames = {
        {"penalties", Sampler::penalties}, {"e", Sampler::penalties}, {"dry", Sampler::dry}, {"d", Sampler::dry},
        {"top_k", Sampler::top_k}, {"top-k", Sampler::top_k}, {"k", Sampler::top_k},
        {"typ_p", Sampler::typ_p}, {"typical_p", Sampler::typ_p}, {"typical-p", Sampler::typ_p}, {"typical", Sampler::typ_p},
        {"typ-p", Sampler::typ_p}, {"typ", Sampler::typ_p}, {"y", Sampler::typ_p},
        {"top_p", Sampler::top_p}, {"top-p", Sampler::top_p}, {"nucleus", Sampler::top_p}, {"p", Sampler::top_p},
        {"min_p", Sampler::min_p}, {"min-p", Sampler::min_p}, {"m", Sampler::min_p}, {"xtc", Sampler::xtc}, {"x", Sampler::xtc},
        {"infill", Sampler::infill}, {"i", Sampler::infill},
        {"temperature", Sampler::temperature}, {"temp", Sampler::temperature}, {"t", Sampler::temperature}};
    for (const auto& [n, s] : kNames)
        if (n == name) return s;
    return std::nullopt;
}

/// `samplers`: an array of names or a string of one-letter codes, in llama-server's order (each
/// at most once). Returns which are on.
std::array<bool, kSamplerNames.size()> read_samplers(const json& v) {
    std::vector<std::string> names;
    if (v.is_string()) {
        for (const char c : v.get<std::string>()) names.emplace_back(1, c);
    } else if (v.is_array()) {
        for (std::size_t i = 0; i < v.size(); ++i) names.push_back(string(v[i], fmt::format("samplers[{}]", i)));
    } else {
        bad("samplers", fmt::format("expected an array of sampler names or a string of their letters, got {}", type_name(v)));
    }
    std::array<bool, kSamplerNames.size()> on{};
    int last = -1;
    for (const std::string& name : names) {
        const std::optional<Sampler> s = sampler_named(name);
        if (!s) bad("samplers", fmt::format("unknown sampler \"{}\"", name.substr(0, 32)));
        if (int(*s) <= last)
            bad("samplers", fmt::format("\"{}\" out of order: aqpim applies the samplers in llama-server's default order, with infill last before the temperature ({})",
                                        name, fmt::join(kSamplerNames, ", ")));
        last = int(*s);
        on[std::size_t(*s)] = true;
    }
    return on;
}

/// One prompt's pieces: a string, or an array of token ids and strings.
std::vector<PromptInput> read_pieces(const json& v, const RequestLimits& limits, const std::string& param) {
    if (v.is_string()) return {{v.get<std::string>(), {}, false}};
    if (!v.is_array()) bad(param, fmt::format("expected a string or an array of token ids and strings, got {}", type_name(v)));
    std::vector<PromptInput> pieces;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string pp = fmt::format("{}[{}]", param, i);
        if (v[i].is_string()) {
            pieces.push_back({v[i].get<std::string>(), {}, false});
            continue;
        }
        const auto id = std::int32_t(integer(v[i], pp, 0, limits.n_vocab - 1));
        if (pieces.empty() || !pieces.back().is_tokens) pieces.push_back({{}, {}, true});
        pieces.back().tokens.push_back(id);
    }
    return pieces;
}

/// `prompt`: one prompt (a string, or token ids and strings mixed) or several (an array whose
/// items are strings or arrays).
std::vector<std::vector<PromptInput>> read_prompts(const json& v, const RequestLimits& limits) {
    const bool several = v.is_array() && !v.empty() &&
                         std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string() || x.is_array(); }) &&
                         (v.size() > 1 || v[0].is_array());
    if (!several) return {read_pieces(v, limits, "prompt")};
    if (int(v.size()) > limits.max_choices)
        bad("prompt", fmt::format("{} prompts: at most {} per request", v.size(), limits.max_choices));
    std::vector<std::vector<PromptInput>> prompts;
    for (std::size_t i = 0; i < v.size(); ++i) prompts.push_back(read_pieces(v[i], limits, fmt::format("prompt[{}]", i)));
    return prompts;
}

/// A field of a sampler aqpim does not have: accepted only where `off` says it does nothing.
template <class Off>
void only_off(const json& body, const char* name, Off off, const char* what) {
    if (const json* v = field(body, name)) {
        if (!v->is_number() || !std::isfinite(v->get<double>())) bad(name, fmt::format("expected a number, got {}", json_excerpt(*v)));
        if (!off(v->get<double>())) bad(name, fmt::format("{} is not implemented: {}", name, what));
    }
}

void read_infill(const json& body, LlamaCompletionParams& lp) {
    const json* prefix = field(body, "input_prefix");
    const json* suffix = field(body, "input_suffix");
    if (!prefix) bad("input_prefix", "missing (the code before the cursor)");
    if (!suffix) bad("input_suffix", "missing (the code after the cursor)");
    lp.input_prefix = string(*prefix, "input_prefix");
    lp.input_suffix = string(*suffix, "input_suffix");
    if (const json* v = field(body, "input_extra")) {
        if (!v->is_array()) bad("input_extra", "expected an array of {\"filename\": string, \"text\": string}");
        if (v->size() > 1024) bad("input_extra", "at most 1024 chunks");
        for (std::size_t i = 0; i < v->size(); ++i) {
            const std::string param = fmt::format("input_extra[{}]", i);
            const json& c = (*v)[i];
            if (!c.is_object()) bad(param, fmt::format("expected an object, got {}", type_name(c)));
            for (const auto& [key, value] : c.items())
                if (key != "text" && key != "filename") bad(param + "." + key, "unrecognized (text, filename)");
            const json* text = field(c, "text");
            if (!text) bad(param + ".text", "missing");
            const json* name = field(c, "filename");
            lp.input_extra.push_back({name ? string(*name, param + ".filename") : "tmp", string(*text, param + ".text")});
        }
    }
    if (const json* v = field(body, "prompt")) lp.prompts.push_back({{string(*v, "prompt"), {}, false}});
}

}  // namespace

LlamaCompletionParams parse_llama_completion_request(const json& body, bool infill, const RequestLimits& limits,
                                                     const TokenizeFn& tokenize, std::string_view body_text) {
    static const std::set<std::string> known = {
        "prompt", "n_predict", "max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "stream", "n_probs",
        "logprobs", "repeat_penalty", "repeat_last_n", "frequency_penalty", "presence_penalty", "logit_bias", "grammar",
        "json_schema", "ignore_eos", "cache_prompt", "cache_salt", "n_keep", "n_discard", "id_slot", "return_tokens", "response_fields",
        "timings_per_token", "post_sampling_probs", "samplers", "typical_p", "dynatemp_range", "dynatemp_exponent",
        "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
        "xtc_probability", "xtc_threshold", "mirostat", "mirostat_tau", "mirostat_eta", "min_keep", "n_indent",
        "t_max_predict_ms", "t_max_prompt_ms", "lora", "image_data", "model", "speculative.n_min", "speculative.n_max",
        "speculative.p_min"};
    static const std::set<std::string> infill_only = {"input_prefix", "input_suffix", "input_extra"};
    for (const auto& item : body.items())
        if (!known.count(item.key()) && !(infill && infill_only.count(item.key())))
            throw ApiError(400, "Unrecognized request argument supplied: " + item.key(), item.key());

    LlamaCompletionParams lp;
    CompletionParams& p = lp.params;
    p.default_length = CompletionParams::DefaultLength::server;
    p.temperature = 0.8f;  // llama-server's defaults
    p.top_p = 1.0f;        // the nucleus is in the processing, at temperature 1
    p.processing.unit_temperature = true;
    p.processing.top_k = 40;
    p.processing.top_p = 0.95f;
    p.processing.min_p = 0.05f;
    p.processing.repetition_window = 64;

    if (infill) {
        read_infill(body, lp);
    } else {
        const json* v = field(body, "prompt");
        if (!v) bad("prompt", "missing");
        lp.prompts = read_prompts(*v, limits);
    }
    const char* length_name = field(body, "n_predict") ? "n_predict" : "max_tokens";
    p.max_tokens_name = length_name;
    if (const json* v = field(body, length_name)) {
        const auto n = integer(*v, length_name, -1, kIntMax);
        if (n == 0) bad(length_name, "0 (only evaluate the prompt) is not supported: ask for at least one token");
        if (n < 0) p.default_length = CompletionParams::DefaultLength::context;
        else p.max_tokens = int(n);
    }
    if (const json* v = field(body, "temperature")) p.temperature = std::max(0.0f, float(number(*v, "temperature", -1e6, 1e6)));
    if (const json* v = field(body, "top_p")) p.processing.top_p = float(number(*v, "top_p", 0, 1));
    if (const json* v = field(body, "seed")) {
        const auto seed = integer(*v, "seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
        if (seed != -1 && seed != 0xFFFFFFFF) p.seed = std::uint64_t(seed);  // llama.cpp's "random seed" values
    }
    if (const json* v = field(body, "stop")) {
        const auto add = [&](const json& s, const std::string& param) {
            std::string text = string(s, param);
            if (text.empty()) bad(param, "a stop string may not be empty");
            if (text.size() > limits.max_stop_bytes) bad(param, fmt::format("longer than {} bytes", limits.max_stop_bytes));
            p.stop.push_back(std::move(text));
        };
        if (v->is_string()) {
            add(*v, "stop");
        } else {
            if (!v->is_array()) bad("stop", fmt::format("expected an array of strings, got {}", type_name(*v)));
            if (int(v->size()) > limits.max_stop) bad("stop", fmt::format("at most {} stop strings", limits.max_stop));
            for (std::size_t i = 0; i < v->size(); ++i) add((*v)[i], fmt::format("stop[{}]", i));
        }
    }
    if (const json* v = field(body, "stream")) p.stream = boolean(*v, "stream");
    // n_probs; `logprobs` where n_probs is absent or 0 (llama-server reads it when n_probs is at its default).
    for (const char* name : {"n_probs", "logprobs"})
        if (const json* v = field(body, name); v && p.top_logprobs == 0) p.top_logprobs = int(integer(*v, name, 0, limits.max_top_logprobs));
    p.logprobs = p.top_logprobs > 0;
    p.report_eos = true;  // llama-server counts and lists EOS as a generated token
    read_processing(body, limits, Dialect::llama, tokenize, p.processing);
    read_output_constraints(body, body_text, p);
    if (const json* v = field(body, "ignore_eos")) lp.ignore_eos = boolean(*v, "ignore_eos");
    read_cache_fields(body, p);
    if (const json* v = field(body, "n_keep")) (void)integer(*v, "n_keep", -1, kIntMax);
    if (const json* v = field(body, "n_discard")) (void)integer(*v, "n_discard", 0, kIntMax);
    if (const json* v = field(body, "t_max_prompt_ms")) (void)integer(*v, "t_max_prompt_ms", -1, kIntMax);
    if (const json* v = field(body, "id_slot"); v && integer(*v, "id_slot", -1, kIntMax) != -1)
        bad("id_slot", "aqpim places each request in a slot itself (-1); a parked sequence is continued with id_slot on "
                       "/v1/completions");
    if (const json* v = field(body, "return_tokens")) lp.return_tokens = boolean(*v, "return_tokens");
    if (const json* v = field(body, "timings_per_token")) lp.timings_per_token = boolean(*v, "timings_per_token");
    if (const json* v = field(body, "post_sampling_probs"); v && boolean(*v, "post_sampling_probs"))
        bad("post_sampling_probs", "not implemented: probabilities are the model's own, before sampling (false)");
    if (const json* v = field(body, "response_fields")) {
        if (!v->is_array() || v->size() > 64) bad("response_fields", "expected an array of at most 64 field names");
        for (std::size_t i = 0; i < v->size(); ++i) lp.response_fields.push_back(string((*v)[i], fmt::format("response_fields[{}]", i)));
    }
    if (const json* v = field(body, "n_indent")) lp.min_indent = int(integer(*v, "n_indent", 0, 1 << 16));
    if (const json* v = field(body, "t_max_predict_ms")) lp.max_predict = std::chrono::milliseconds(integer(*v, "t_max_predict_ms", 0, kIntMax));
    if (const json* v = field(body, "model")) lp.model = string(*v, "model");
    for (const char* name : {"lora", "image_data"})
        if (const json* v = field(body, name); v && !(v->is_array() && v->empty()))
            bad(name, "not supported (aqpim serves one model without adapters or images): give [] or leave it out");

    // Samplers aqpim does not have, at the values that turn them off; their other settings are
    // read and have no effect.
    only_off(body, "typical_p", [](double x) { return x >= 1; }, "give 1 (off)");
    only_off(body, "dynatemp_range", [](double x) { return x <= 0; }, "give 0 (off)");
    only_off(body, "dry_multiplier", [](double x) { return x <= 0; }, "give 0 (off)");
    only_off(body, "xtc_probability", [](double x) { return x <= 0; }, "give 0 (off)");
    only_off(body, "mirostat", [](double x) { return x == 0; }, "give 0 (off)");
    only_off(body, "min_keep", [](double x) { return x == 0 || x == 1; }, "give 0 or 1 (at least the most likely token is kept)");
    for (const char* name : {"dynatemp_exponent", "dry_base", "xtc_threshold", "mirostat_tau", "mirostat_eta", "speculative.p_min"})
        if (const json* v = field(body, name)) (void)number(*v, name, -1e9, 1e9);
    for (const char* name : {"dry_allowed_length", "dry_penalty_last_n", "speculative.n_min", "speculative.n_max"})
        if (const json* v = field(body, name)) (void)integer(*v, name, -1, kIntMax);
    if (const json* v = field(body, "dry_sequence_breakers")) {
        if (!v->is_array() || v->empty()) bad("dry_sequence_breakers", "expected a non-empty array of strings");
        for (std::size_t i = 0; i < v->size(); ++i) (void)string((*v)[i], fmt::format("dry_sequence_breakers[{}]", i));
    }
    std::array<bool, kSamplerNames.size()> sampler_on{};
    sampler_on.fill(true);
    sampler_on[std::size_t(Sampler::infill)] = false;
    if (const json* v = field(body, "samplers")) {
        const auto on = sampler_on = read_samplers(*v);
        auto off = [&](Sampler s) { return !on[std::size_t(s)]; };
        if (off(Sampler::penalties)) {
            p.processing.repetition_penalty = 1.0f;
            p.processing.frequency_penalty = p.processing.presence_penalty = 0.0f;
        }
        if (off(Sampler::top_k)) p.processing.top_k = 0;
        if (off(Sampler::top_p)) p.processing.top_p = 1.0f;
        if (off(Sampler::min_p)) p.processing.min_p = 0.0f;
        if (off(Sampler::temperature)) p.temperature = 1.0f;  // the draw is at the logits' own scale
        lp.infill_sampler = !off(Sampler::infill);
    }
    // The settings as llama-server reports them; the samplers aqpim does not have, at the values
    // that turn them off (the only ones accepted).
    json samplers = json::array();  // as given, or llama-server's default chain
    for (std::size_t i = 0; i < kSamplerNames.size(); ++i)
        if (sampler_on[i]) samplers.push_back(kSamplerNames[i]);
    const json* bias = field(body, "logit_bias");
    lp.settings = {{"n_predict", p.max_tokens ? *p.max_tokens : -1},
                   {"max_tokens", p.max_tokens ? *p.max_tokens : -1},
                   {"seed", p.seed ? json(*p.seed) : json(0xFFFFFFFFu)},
                   {"temperature", p.temperature},
                   {"dynatemp_range", 0.0},
                   {"dynatemp_exponent", 1.0},
                   {"top_k", p.processing.top_k},
                   {"top_p", p.processing.top_p},
                   {"min_p", p.processing.min_p},
                   {"xtc_probability", 0.0},
                   {"xtc_threshold", 0.1},
                   {"typical_p", 1.0},
                   {"repeat_last_n", p.processing.repetition_window},
                   {"repeat_penalty", p.processing.repetition_penalty},
                   {"presence_penalty", p.processing.presence_penalty},
                   {"frequency_penalty", p.processing.frequency_penalty},
                   {"dry_multiplier", 0.0},
                   {"mirostat", 0},
                   {"min_keep", 0},
                   {"stop", p.stop},
                   {"n_keep", field(body, "n_keep") ? *field(body, "n_keep") : json(0)},
                   {"n_probs", p.top_logprobs},
                   {"stream", p.stream},
                   {"ignore_eos", lp.ignore_eos},
                   {"logit_bias", bias ? *bias : json::array()},
                   {"samplers", samplers},
                   {"post_sampling_probs", false},
                   {"lora", json::array()},
                   {"n_indent", lp.min_indent},
                   {"t_max_predict_ms", lp.max_predict.count()},
                   {"timings_per_token", lp.timings_per_token},
                   {"return_tokens", lp.return_tokens},
                   {"grammar", field(body, "grammar") ? *field(body, "grammar") : json("")}};
    return lp;
}

}  // namespace aqpim::serve
