// llama-server's own POST /completion (/completions) and /infill: its request fields and response
// objects over the same engine as the OpenAI endpoints (docs/serve.md "llama-server's own endpoints").

#include <fmt/format.h>

#include <utility>

#include "serve/http_impl.h"
#include "serve/llama_request.h"
#include "serve/llama_response.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

LlamaStop stop_of(const Channel::Final& f) {
    if (f.finish == FinishReason::length || f.stopped_by_limit) return {"limit", {}};
    if (!f.stop_word.empty()) return {"word", f.stop_word};
    if (f.finish == FinishReason::stop) return {"eos", {}};
    return {"none", {}};
}

LlamaTimings timings_of(const Channel::Final& f) {
    return {f.n_prompt_fed, f.prompt_seconds, f.n_generated, f.predicted_seconds};
}

}  // namespace

void HttpServer::Impl::llama_completion(const httplib::Request& req, httplib::Response& res, bool infill) {
    const json body = parse_request_json(req.body);
    if (infill && !fim)
        throw ApiError(501, "Infill is not supported by this model: it has no fill-in-the-middle tokens (<|fim_prefix|>, "
                            "<fim_prefix>, <\uFF5Cfim\u2581begin\uFF5C> or \u2581<PRE>, with their suffix and middle tokens)",
                       "", "not_supported_error");
    const TokenizeFn tokenize = [this](const std::string& text) { return tokenizer->encode(text, false); };
    LlamaCompletionParams lp = parse_llama_completion_request(body, infill, limits, tokenize, req.body);
    CompletionParams& p = lp.params;

    std::vector<std::vector<std::int32_t>> stop_sequences;  // /infill: the tokens that end a middle
    if (infill)
        for (const std::int32_t t : fim->end) stop_sequences.push_back({t});
    if (lp.ignore_eos) {
        p.processing.banned.push_back(engine.options().eos_token);
        for (const auto& seq : stop_sequences) p.processing.banned.push_back(seq[0]);
        stop_sequences.clear();
    }
    if (lp.infill_sampler) {  // its end tokens: EOS first, then the FIM ones not banned
        InfillSampling sampling{guide_vocabulary, {}};
        if (!lp.ignore_eos) sampling.ends.push_back(engine.options().eos_token);
        for (const auto& seq : stop_sequences) sampling.ends.push_back(seq[0]);
        if (sampling.ends.empty()) throw ApiError(400, "the infill sampler with ignore_eos leaves no token to end with", "samplers");
        p.processing.infill = std::move(sampling);
    }
    std::vector<Choice> choices;
    if (infill) {
        // The prompt is fitted to the context less the tokens asked for (the server's default when
        // none or -1 is given).
        const std::int64_t out = p.max_tokens ? *p.max_tokens : options.default_max_tokens;
        if (out >= n_ctx)
            throw ApiError(400, fmt::format("{} ({}) leaves no room for the infill prompt in the context of {} tokens",
                                            p.max_tokens ? p.max_tokens_name : "the server's --n-predict", out, n_ctx),
                           p.max_tokens_name);
        const InfillParts parts{infill_extra_tokens(*tokenizer, *fim, lp.input_extra), tokenize(lp.input_prefix),
                                lp.prompts.empty() ? std::vector<std::int32_t>{} : tokenize(lp.prompts[0][0].text),
                                tokenize(lp.input_suffix)};
        choices.push_back({infill_prompt(*tokenizer, *fim, parts, std::size_t(std::max<std::int64_t>(0, n_ctx - out))), nullptr, 0, {}, {}});
    } else {
        for (const std::vector<PromptInput>& pieces : lp.prompts) {
            // BOS (where the model adds it) when the prompt starts with text, as llama-server.
            std::vector<std::int32_t> prompt;
            for (const PromptInput& piece : pieces) {
                const std::vector<std::int32_t> t = piece.is_tokens ? piece.tokens : tokenizer->encode(piece.text, &piece == &pieces[0]);
                prompt.insert(prompt.end(), t.begin(), t.end());
            }
            if (prompt.empty())
                throw ApiError(400, lp.prompts.size() > 1 ? fmt::format("prompt {} is empty", choices.size()) : "the prompt is empty",
                               "prompt");
            choices.push_back({std::move(prompt), nullptr, 0, {}, {}});
        }
    }
    const ChoiceSettings settings{p.stop, stop_sequences, ReasoningStart::closed, {lp.min_indent, lp.max_predict}, true};
    const std::shared_ptr<Wakeup> wakeup = submit_choices(p, choices, settings);

    auto cancel_all = [this, choices] { return cancel_choices(choices); };
    auto gone = [this, choices] { return client_gone(choices); };
    auto release = [gone](bool success) {
        if (!success) gone();
    };
    auto piece = [this](std::int32_t prev, std::int32_t t) { return tokenizer->piece(prev, t); };
    json settings_json = lp.settings;
    const std::string model = lp.model.empty() ? options.model_alias : lp.model;  // llama-server echoes the request's
    settings_json["n_ctx"] = n_ctx;
    settings_json["model"] = model;
    // A finished choice's result; `streamed`: its text went out in chunks already.
    auto result = [this, choices, settings_json, model, return_tokens = lp.return_tokens](std::size_t i, const Channel::Final& fin,
                                                                                   std::string text, bool new_line,
                                                                                   std::vector<std::int32_t> ids) {
        std::string prompt;
        std::int32_t prev = -1;
        for (const std::int32_t t : choices[i].prompt) prompt += tokenizer->piece(std::exchange(prev, t), t);
        LlamaResult r{i, std::move(text), new_line, return_tokens ? std::move(ids) : std::vector<std::int32_t>{}, fin.slot,
                      model, fin.n_prompt, settings_json, valid_utf8(prompt), stop_of(fin),
                      std::max(0, fin.n_prompt - fin.n_prompt_fed), timings_of(fin)};
        return llama_result_json(r);
    };
    auto error_of = [](const Channel::Final& fin) { return ApiError(500, fin.error.empty() ? "cancelled" : fin.error); };

    if (!p.stream) {
        res.set_chunked_content_provider("application/json", [=](std::size_t, httplib::DataSink& sink) {
            json results = json::array();
            for (std::size_t i = 0; i < choices.size(); ++i) {
                std::string text;
                std::vector<TokenText> tokens;
                Channel::Final fin;
                if (!read_whole_choice(*choices[i].channel, sink, text, tokens, fin)) return gone();
                if (fin.finish == FinishReason::error || fin.finish == FinishReason::cancelled) {
                    cancel_all();
                    const std::string s = dump_json(error_of(fin).to_json());
                    sink.write(s.data(), s.size());
                    sink.done();
                    return true;
                }
                const bool new_line = text.find('\n') != std::string::npos;
                json r = result(i, fin, std::move(text), new_line, token_ids_of(tokens));
                if (p.logprobs) r["completion_probabilities"] = llama_probs_json(tokens, piece);
                results.push_back(select_fields(r, lp.response_fields));
            }
            const std::string s = dump_json(results.size() == 1 ? results[0] : results);
            return write_last(sink, s) || gone();
        }, release);
        return;
    }

    // Streamed: a chunk per piece of text ({index, content, tokens, stop: false, id_slot,
    // tokens_predicted, tokens_evaluated}), each choice's result last (stop: true); no [DONE].
    start_event_stream(res, [=](std::size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        std::vector<int> n_sent(choices.size(), 0);
        std::vector<bool> done(choices.size(), false), new_line(choices.size(), false);
        std::size_t n_open = choices.size();
        for (;;) {
            const std::uint64_t seen = wakeup->generation();  // before looking: an event after it wakes us
            for (std::size_t i = 0; i < choices.size(); ++i) {
                if (done[i]) continue;
                std::vector<TextDelta> got;
                Channel::Final fin;
                const bool finished = choices[i].channel->poll(got, fin);
                const std::optional<Channel::Progress> progress = choices[i].channel->progress();
                for (TextDelta& d : got) {
                    n_sent[i] += int(d.tokens.size());
                    new_line[i] = new_line[i] || d.text.find('\n') != std::string::npos;
                    json chunk = {{"index", i},
                                  {"content", d.text},
                                  {"tokens", token_ids_of(d.tokens)},
                                  {"stop", false},
                                  {"id_slot", progress ? progress->slot : -1},
                                  {"tokens_predicted", n_sent[i]},
                                  {"tokens_evaluated", choices[i].prompt.size()}};
                    if (p.logprobs) chunk["completion_probabilities"] = llama_probs_json(d.tokens, piece);
                    if (lp.timings_per_token && progress)
                        chunk["timings"] = llama_timings_json({progress->n_prompt_fed, progress->prompt_seconds, n_sent[i],
                                                               progress->predicted_seconds});
                    if (!send(sse_event(chunk))) return gone();  // response_fields: the results only, as llama-server
                }
                if (!finished) continue;
                if (fin.finish == FinishReason::error || fin.finish == FinishReason::cancelled) {
                    cancel_all();
                    send(sse_error_event(error_of(fin).to_json()["error"]));
                    sink.done();
                    return true;
                }
                done[i] = true;
                --n_open;
                if (!send(sse_event(select_fields(result(i, fin, "", new_line[i], {}), lp.response_fields)))) return gone();
            }
            if (n_open == 0) break;
            if (!wakeup->wait_until(seen, std::chrono::steady_clock::now() + 1000ms) && !send(": keep-alive\n\n")) return gone();
        }
        sink.done();
        return true;
    }, release);
}

}  // namespace aqpim::serve
