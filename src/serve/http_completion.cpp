// POST /v1/completions and /v1/chat/completions: a request becomes a GenerationRequest; its text
// goes back whole or as server-sent events (docs/serve.md, "Responses").

#include <algorithm>
#include <limits>

#include "aqpim/error.h"
#include "serve/http_impl.h"
#include "serve/reasoning.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

/// Counts a choice's prompt in usage (once per prompt): the tokens, and those not prefilled.
void add_prompt(Usage& usage, const Channel::Final& f) {
    usage.prompt_tokens += f.n_prompt;
    usage.cached_tokens += std::max(0, f.n_prompt - f.n_prompt_fed);
}

const char* finish_name(const Channel::Final& f) {
    return f.finish == FinishReason::length ? "length" : "stop";  // eos, a stop sequence or a stop string
}

/// The echoed prompt's tokens with the scores the engine sent (unscored where it sent none).
std::vector<TokenText> scored(std::vector<TokenText> echoed, const std::optional<std::vector<ScoredToken>>& scores) {
    for (std::size_t i = 0; i < echoed.size(); ++i) {
        const ScoredToken* s = scores && i < scores->size() ? &(*scores)[i] : nullptr;
        echoed[i].scored = s && s->logprob;
        if (echoed[i].scored) {
            echoed[i].logprob = *s->logprob;
            echoed[i].top = s->top;
        }
    }
    return echoed;
}

/// best_of: of each prompt's best_of choices (consecutive in `out`), the n with the highest mean
/// log probability per generated token (`mean_logprob`), best first (a tie: the lower seed).
std::vector<ChoiceText> best_of_each(std::vector<ChoiceText> out, const std::vector<double>& mean_logprob, int n,
                                     int best_of) {
    std::vector<ChoiceText> best;
    for (std::size_t first = 0; first < out.size(); first += std::size_t(best_of)) {
        std::vector<std::size_t> order(static_cast<std::size_t>(best_of));
        for (std::size_t j = 0; j < order.size(); ++j) order[j] = first + j;
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return mean_logprob[a] > mean_logprob[b]; });
        for (int j = 0; j < n; ++j) best.push_back(std::move(out[order[std::size_t(j)]]));
    }
    return best;
}

}  // namespace

std::shared_ptr<Wakeup> HttpServer::Impl::submit_choices(const CompletionParams& p, std::vector<Choice>& choices,
                                                         const ChoiceSettings& settings) {
    std::int32_t slot_token = -1;  // the parked sequence's last token (id_slot): text continues after it
    if (p.id_slot >= 0)
        for (const SlotInfo& s : engine.slots()) {
            if (s.id != p.id_slot) continue;
            // Refused here, before the response starts: an idle or cached slot holds nothing to
            // continue, a running one is another request's (admission would not wait for it: the
            // queue is first in, first out). A slot that starts running between this check and the
            // request's admission fails it inside the response (the engine checks it then).
            if (s.phase == SlotPhase::idle || s.phase == SlotPhase::cached)
                throw ApiError(400, fmt::format("slot {} holds no parked sequence ({}): park one with keep_slot first",
                                                p.id_slot, slot_phase_name(s.phase)), "id_slot");
            if (s.phase == SlotPhase::fetch || s.phase == SlotPhase::prefill || s.phase == SlotPhase::decode)
                throw ApiError(400, fmt::format("slot {} is busy ({}): continue it once its request has ended", p.id_slot,
                                                slot_phase_name(s.phase)), "id_slot");
            slot_token = s.last_token;
        }
    const std::uint64_t seed = p.seed ? *p.seed : draw_seed();
    const auto wakeup = std::make_shared<Wakeup>();  // one for the request: a stream waits on all its choices
    std::vector<GenerationRequest> requests;
    std::vector<EventCallback> callbacks;
    std::size_t logprob_entries = 0;  // what the response's logprobs will hold
    for (std::size_t i = 0; i < choices.size(); ++i) {
        Choice& c = choices[i];
        GenerationRequest g;
        g.prompt = c.prompt;
        g.stop_sequences = settings.stop_sequences;
        const std::int64_t room = n_ctx - std::int64_t(g.prompt.size());
        g.max_tokens = p.max_tokens                                         ? *p.max_tokens
                     : p.default_length == CompletionParams::DefaultLength::server  ? int(std::clamp<std::int64_t>(room, 1, options.default_max_tokens))
                     : p.default_length == CompletionParams::DefaultLength::context ? int(std::clamp<std::int64_t>(room, 1, std::numeric_limits<int>::max()))
                                                                                    : 16;
        if (std::int64_t(g.prompt.size()) + g.max_tokens > n_ctx)  // named here: the engine knows no field names
            throw ApiError(400, fmt::format("prompt ({} tokens) + {} ({}) exceeds the context of {} tokens", g.prompt.size(),
                                            p.max_tokens_name, g.max_tokens, n_ctx), p.max_tokens_name);
        g.sampler.temperature = p.top_p == 0.0f ? 0.0f : p.temperature;
        g.sampler.top_p = p.top_p == 0.0f ? 1.0f : p.top_p;
        g.sampler.seed = seed + std::uint64_t(i % std::size_t(p.best_of));  // choice j of a prompt: seed + j
        g.top_logprobs = p.logprobs ? p.top_logprobs : 0;
        g.processing = p.processing;
        g.prompt_logprobs = p.echo && p.logprobs;
        g.report_eos = p.report_eos;
        g.resume_slot = p.id_slot;
        g.park = p.keep_slot;
        g.cache_salt = p.cache_salt;
        g.cache_prompt = p.cache_prompt;
        if (p.constrained()) g.guide_vocabulary = guide_vocabulary;
        g.json_schema = p.json_schema;
        g.regex = p.regex;
        g.grammar = p.grammar;
        g.reasoning = settings.reasoning;

        std::int32_t prev = slot_token;
        if (p.echo)
            for (std::int32_t t : c.prompt) {
                c.echoed.push_back({t, tokenizer->piece(prev, t), 0.0f, {}, false, prev});
                c.echo_text += c.echoed.back().text;
                prev = t;
            }
        const std::int32_t prev_token = c.prompt.empty() ? slot_token : c.prompt.back();
        c.channel = std::make_shared<Channel>(tokenizer, settings.stops, prev_token, wakeup, settings.limits, settings.per_token);
        if (p.logprobs)
            logprob_entries += (c.echoed.size() + std::size_t(std::max(0, g.max_tokens))) * std::size_t(1 + p.top_logprobs);
        requests.push_back(std::move(g));
        callbacks.push_back([ch = c.channel](const TokenEvent& e) { return ch->on_event(e); });
    }
    // The whole response is built in memory when it is not streamed: bound what logprobs can make it.
    if (!p.stream && logprob_entries > limits.max_logprob_entries)
        throw ApiError(400, fmt::format("logprobs of {} tokens x (1 + {} alternatives) over {} choices: {} entries, "
                                        "more than {} (fewer choices, tokens or alternatives, or stream)",
                                        logprob_entries / std::size_t(1 + p.top_logprobs) / choices.size(),
                                        p.top_logprobs, choices.size(), logprob_entries, limits.max_logprob_entries),
                       "logprobs");
    const std::vector<SubmitResult> submitted = engine.submit_all(std::move(requests), std::move(callbacks));
    const SubmitResult& r = submitted[0];  // all accepted, or all with the same rejection
    switch (r.rejection) {
        case Rejection::none: break;
        case Rejection::queue_full: throw ApiError(503, r.message);
        case Rejection::never_fits: throw ApiError(400, r.message, p.max_tokens_name);
        case Rejection::invalid: throw ApiError(400, r.message);
    }
    for (std::size_t i = 0; i < choices.size(); ++i) choices[i].request_id = submitted[i].request_id;

    return wakeup;
}

std::string HttpServer::Impl::chat_prompt(const CompletionParams& p) const {
    std::string text;
    try {
        text = render_chat(chat_format, p.messages, chat_tokens);
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "messages");
    }
    if (reasoning_format == ReasoningFormat::deepseek)
        text += reasoning_prompt_end(template_opens_reasoning, p.enable_thinking.value_or(options.reasoning_budget != 0));
    return text;
}

void HttpServer::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const CompletionParams p = parse_completion_request(parse_request_json(req.body), chat, limits, req.body);

    std::vector<std::string> stops = p.stop;
    std::vector<Choice> choices;
    std::vector<std::vector<std::int32_t>> fim_end;  // fill in the middle: the tokens that end a middle
    // Reasoning (docs/serve.md "Reasoning"): a chat answer's <think>...</think> is reasoning_content,
    // and an output constraint holds after it; `reasoning_start` is where the prompt leaves it.
    const bool reasoning = chat && reasoning_format == ReasoningFormat::deepseek;
    ReasoningStart reasoning_start = ReasoningStart::closed;
    if (chat) {
        const std::string text = chat_prompt(p);
        if (reasoning) reasoning_start = reasoning_start_of(text);
        // Continuing a parked sequence (id_slot): the text goes after it, without BOS.
        choices.push_back({tokenizer->encode(text, p.id_slot < 0), nullptr, 0, {}, {}});
        stops.insert(stops.end(), chat_turn_end.begin(), chat_turn_end.end());
    } else if (!p.suffix.empty()) {  // fill in the middle: each prompt is the prefix
        if (!fim)
            throw ApiError(400, "this model has no fill-in-the-middle tokens (<|fim_prefix|>, <fim_prefix>, <\uFF5Cfim\u2581begin\uFF5C> "
                                "or \u2581<PRE>, with their suffix and middle tokens)", "suffix");
        for (const PromptInput& in : p.prompts)
            choices.push_back({infill_prompt(*tokenizer, *fim, in.is_tokens ? in.tokens : tokenizer->encode(in.text, false), p.suffix),
                               nullptr, 0, {}, {}});
        for (const std::int32_t t : fim->end) fim_end.push_back({t});
    } else {
        for (const PromptInput& in : p.prompts)
            choices.push_back({in.is_tokens ? in.tokens : tokenizer->encode(in.text, p.id_slot < 0), nullptr, 0, {}, {}});
    }
    // n choices per prompt (best_of of them generated), in OpenAI's order (prompt i's are i * n ..
    // i * n + n - 1).
    std::vector<Choice> each;
    for (const Choice& c : choices) each.insert(each.end(), std::size_t(p.best_of), c);
    choices = std::move(each);
    for (std::size_t i = 0; i < choices.size(); ++i)
        if (choices[i].prompt.empty() && p.id_slot < 0)
            throw ApiError(400, choices.size() > 1 ? fmt::format("prompt {} is empty", i / std::size_t(p.best_of)) : "the prompt is empty",
                           chat ? "messages" : "prompt");

    const std::shared_ptr<Wakeup> wakeup = submit_choices(p, choices, {stops, chat ? chat_turn_end_tokens : fim_end, reasoning_start, {}});
    const ResponseHeader h{chat, fmt::format("{}-{}-{}", chat ? "chatcmpl" : "cmpl", id_prefix, choices[0].request_id),
                           options.model_alias, std::int64_t(std::time(nullptr))};
    auto cancel_all = [this, choices] { return cancel_choices(choices); };
    auto gone = [this, choices] { return client_gone(choices); };
    auto logprobs = [this, chat, want = p.logprobs](const std::vector<TokenText>& tokens, std::size_t offset) {
        return want ? logprobs_json(chat, tokens, offset, [this](std::int32_t prev, std::int32_t t) { return tokenizer->piece(prev, t); }) : json(nullptr);
    };
    auto release = [gone](bool success) {
        if (!success) gone();
    };
    // Tool calls (chat with tools): a finished text that is a call is sent as message.tool_calls,
    // finish_reason tool_calls (stop for a named function, as OpenAI answers a forced call).
    const bool tools = p.tool_choice != CompletionParams::ToolChoice::none;
    const char* tool_finish = p.tool_choice == CompletionParams::ToolChoice::named ? "stop" : "tool_calls";
    std::vector<std::uint64_t> request_ids;
    for (const Choice& c : choices) request_ids.push_back(c.request_id);
    auto call_id = [h = id_prefix, request_ids](std::size_t i) { return fmt::format("call_{}_{}_{}", h, request_ids[i], i); };

    if (!p.stream) {
        const std::int32_t eos = engine.options().eos_token;
        // Sent chunked: while the request waits, a space every second notices a client that went
        // away (read_whole_choice), and its pages are freed at once.
        res.set_chunked_content_provider("application/json", [=](std::size_t, httplib::DataSink& sink) {
            std::vector<ChoiceText> out;
            std::vector<double> mean_logprob;  // per generated token, of each choice (best_of)
            Usage usage;
            const ApiError* failed = nullptr;
            std::optional<ApiError> error;
            for (const Choice& c : choices) {
                std::string text;
                std::vector<TokenText> tokens;
                Channel::Final fin;
                if (!read_whole_choice(*c.channel, sink, text, tokens, fin)) return gone();
                if (fin.finish == FinishReason::error && !failed) failed = &error.emplace(500, fin.error);
                // best_of ranks by the generated tokens' mean log probability: EOS left out (it is
                // reported only to a scoring request), a choice without a token (EOS or a stop
                // string first) ranked last.
                double sum = 0;
                std::size_t counted = 0;
                for (const TokenText& t : tokens)
                    if (t.token != eos) sum += t.logprob, ++counted;
                mean_logprob.push_back(counted ? sum / double(counted) : -std::numeric_limits<double>::infinity());
                if (p.echo) {
                    std::vector<TokenText> all = scored(c.echoed, c.channel->prompt_scores());
                    all.insert(all.end(), std::make_move_iterator(tokens.begin()), std::make_move_iterator(tokens.end()));
                    tokens = std::move(all);
                    text = c.echo_text + text;
                }
                ChoiceText choice{std::move(text), finish_name(fin), logprobs(tokens, 0), nullptr, {}};
                if (reasoning) {
                    ReasoningSplit::Piece split = ReasoningSplit::whole(choice.text, reasoning_start);
                    choice.text = std::move(split.content);
                    choice.reasoning = std::move(split.reasoning);
                }
                if (tools && fin.finish == FinishReason::stop) {
                    ToolCallsRead read = tool_calls_of(choice.text, p.tool_names, call_id(std::size_t(&c - choices.data())),
                                                       p.parallel_tool_calls);
                    if (!read.calls.is_null()) {
                        choice.tool_calls = std::move(read.calls);
                        choice.text = std::move(read.content);
                        choice.finish_reason = tool_finish;
                    }
                }
                out.push_back(std::move(choice));
                if ((&c - choices.data()) % p.best_of == 0) add_prompt(usage, fin);  // a prompt once, whatever n
                usage.completion_tokens += fin.n_generated;  // every sequence generated, as OpenAI counts best_of
            }
            if (p.best_of > p.n) out = best_of_each(std::move(out), mean_logprob, p.n, p.best_of);
            const std::string s = dump_json(failed ? failed->to_json() : completion_json(h, out, usage));
            return write_last(sink, s) || gone();
        }, release);
        return;
    }

    // Streamed: each choice's chunks carry its index, interleaved as its tokens come (OpenAI's
    // order for n > 1); a choice's finish_reason chunk ends it, [DONE] ends the stream.
    start_event_stream(res, [=](std::size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        struct Progress {
            std::size_t offset = 0;  ///< text sent so far (logprobs' text_offset)
            bool echo_due = false;
            bool done = false;
            /// Tools: the text is held while it may still be a call (required, named: all of it;
            /// auto: while it may still be calls from its start, may_be_tool_calls, or from a piece
            /// that may open Hermes' tags on, may_open_tool_calls).
            bool holding = false;
            bool sent_content = false;  ///< text went out as content: what is held after it can only be Hermes' tags
            std::string held;
            std::vector<TokenText> held_tokens;
            ReasoningSplit split;  ///< reasoning: what goes out as reasoning_content, what as content
        };
        std::vector<Progress> progress(choices.size(), Progress{0, p.echo, false, tools, false, {}, {}, ReasoningSplit(reasoning_start)});
        // Sends what a choice holds as content.
        auto flush = [&](std::size_t i) {
            Progress& pr = progress[i];
            pr.holding = false;
            pr.sent_content = pr.sent_content || !pr.held.empty();
            if (pr.held.empty() && !p.logprobs) return true;
            const bool ok = send(sse_event(stream_chunk_json(h, i, pr.held, logprobs(pr.held_tokens, pr.offset), nullptr)));
            pr.offset += pr.held.size();
            pr.held.clear();
            pr.held_tokens.clear();
            return ok;
        };
        if (chat)
            for (std::size_t i = 0; i < choices.size(); ++i)
                if (!send(sse_event(stream_chunk_json(h, i, "", nullptr, nullptr, true)))) return gone();
        // The echoed prompt goes first; its scores (with logprobs) come before any generated token.
        auto echo = [&](std::size_t i, bool done) {
            const Choice& c = choices[i];
            Progress& pr = progress[i];
            if (!pr.echo_due) return true;
            std::optional<std::vector<ScoredToken>> scores = p.logprobs ? c.channel->prompt_scores() : std::nullopt;
            if (p.logprobs && !scores && !done) return true;
            pr.echo_due = false;
            pr.offset = c.echo_text.size();
            return send(sse_event(stream_chunk_json(h, i, c.echo_text, logprobs(scored(c.echoed, scores), 0), nullptr)));
        };
        Usage usage;
        std::size_t n_open = choices.size();
        for (;;) {
            const std::uint64_t seen = wakeup->generation();  // before looking: an event after it wakes us
            for (std::size_t i = 0; i < choices.size(); ++i) {
                Progress& pr = progress[i];
                if (pr.done) continue;
                std::vector<TextDelta> got;
                Channel::Final fin;
                const bool done = choices[i].channel->poll(got, fin);
                if (!echo(i, done)) return gone();
                const bool auto_calls = p.tool_choice == CompletionParams::ToolChoice::auto_call;
                // Reasoning first: what is reasoning goes out as it comes (with the logprobs of the
                // tokens read so far); what is content goes on as the delta's text.
                const auto split = [&](TextDelta& d, ReasoningSplit::Piece piece) {
                    if (!piece.reasoning.empty()) {
                        if (!send(sse_event(stream_reasoning_json(h, i, piece.reasoning, logprobs(d.tokens, pr.offset))))) return false;
                        d.tokens.clear();
                    }
                    d.text = std::move(piece.content);
                    return true;
                };
                if (reasoning) {
                    for (TextDelta& d : got)
                        if (!split(d, pr.split.feed(d.text))) return gone();
                    if (done) {
                        got.emplace_back();
                        if (!split(got.back(), pr.split.finish())) return gone();
                    }
                }
                for (TextDelta& d : got) {
                    if (!pr.holding && auto_calls && may_open_tool_calls(d.text)) pr.holding = true;  // Hermes' tags after content
                    if (pr.holding) {
                        pr.held += d.text;
                        for (TokenText& t : d.tokens) pr.held_tokens.push_back(std::move(t));
                        const bool may_be_calls = may_open_tool_calls(pr.held) || (!pr.sent_content && may_be_tool_calls(pr.held));
                        if (auto_calls && !may_be_calls && !flush(i)) return gone();
                        continue;
                    }
                    if (d.text.empty() && !p.logprobs) continue;
                    pr.sent_content = pr.sent_content || !d.text.empty();
                    if (!send(sse_event(stream_chunk_json(h, i, d.text, logprobs(d.tokens, pr.offset), nullptr))))
                        return gone();
                    pr.offset += d.text.size();
                }
                if (!done) continue;
                if (fin.finish == FinishReason::error) {  // the others stop too: the stream ends with the error
                    cancel_all();
                    send(sse_event(ApiError(500, fin.error).to_json()));
                    send(kSseDone);
                    sink.done();
                    return true;
                }
                pr.done = true;
                --n_open;
                const char* finish = finish_name(fin);
                if (pr.holding) {
                    const ToolCallsRead read =
                        fin.finish != FinishReason::stop ? ToolCallsRead{}
                        : pr.sent_content                ? tool_calls_in_tags(pr.held, p.tool_names, call_id(i), p.parallel_tool_calls)
                                                         : tool_calls_of(pr.held, p.tool_names, call_id(i), p.parallel_tool_calls);
                    if (!read.calls.is_null()) {
                        if (!read.content.empty() && !send(sse_event(stream_chunk_json(h, i, read.content, nullptr, nullptr))))
                            return gone();
                        if (!send(sse_event(stream_tool_calls_json(h, i, read.calls, logprobs(pr.held_tokens, pr.offset))))) return gone();
                        finish = tool_finish;
                    } else if (!flush(i)) {
                        return gone();
                    }
                }
                if (!send(sse_event(stream_chunk_json(h, i, "", nullptr, finish)))) return gone();
                if (i % std::size_t(p.best_of) == 0) add_prompt(usage, fin);  // a prompt once, whatever n
                usage.completion_tokens += fin.n_generated;
            }
            if (n_open == 0) break;
            if (!wakeup->wait_until(seen, std::chrono::steady_clock::now() + 1000ms) && !send(": keep-alive\n\n"))
                return gone();
        }
        if (p.include_usage) send(sse_event(stream_usage_json(h, usage)));
        send(kSseDone);
        sink.done();
        return true;
    }, release);
}

}  // namespace aqpim::serve
