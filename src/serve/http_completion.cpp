// POST /v1/completions and /v1/chat/completions: a request becomes a GenerationRequest; its text
// goes back whole or as server-sent events (docs/serve.md, "Responses").

#include <algorithm>

#include "aqpim/error.h"
#include "serve/http_impl.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;
using namespace std::chrono_literals;

bool Channel::on_event(const TokenEvent& e) {
    const bool last = e.finish != FinishReason::none;
    TextDelta d = last ? text_.flush() : text_.push(e);
    std::lock_guard<std::mutex> lk(mu_);
    if (!d.empty()) deltas_.push_back(std::move(d));
    if (last) {
        done_ = true;
        final_ = {e.finish, text_.stopped(), e.n_prompt, e.n_generated, e.error};
    }
    cv_.notify_all();
    return !last && text_.stopped();
}

bool Channel::wait(std::chrono::milliseconds timeout, std::vector<TextDelta>& out, Final& final) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return done_ || !deltas_.empty(); });
    for (auto& d : deltas_) out.push_back(std::move(d));
    deltas_.clear();
    if (done_) final = final_;
    return done_;
}

namespace {

const char* finish_name(const Channel::Final& f) {
    return f.finish == FinishReason::length ? "length" : "stop";  // eos, a stop sequence or a stop string
}

}  // namespace

void HttpServer::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const CompletionParams p = parse_completion_request(parse_request_json(req.body), chat, limits);

    GenerationRequest g;
    std::vector<std::string> stops = p.stop;
    if (chat) {
        std::string text;
        try {
            text = render_chat(chat_format, p.messages, chat_tokens);
        } catch (const Error& e) {
            throw ApiError(400, e.what(), "messages");
        }
        // Continuing a parked sequence (id_slot): the text goes after it, without BOS.
        g.prompt = tokenizer->encode(text, p.id_slot < 0);
        g.stop_sequences = chat_turn_end_tokens;
        stops.insert(stops.end(), chat_turn_end.begin(), chat_turn_end.end());
    } else {
        g.prompt = p.prompt_is_tokens ? p.prompt_tokens : tokenizer->encode(p.prompt_text, p.id_slot < 0);
    }
    if (g.prompt.empty() && p.id_slot < 0) throw ApiError(400, "the prompt is empty", chat ? "messages" : "prompt");
    const std::int64_t room = n_ctx - std::int64_t(g.prompt.size());
    g.max_tokens = p.max_tokens ? *p.max_tokens
                 : chat         ? int(std::clamp<std::int64_t>(room, 1, options.default_max_tokens))
                                : 16;
    g.sampler.temperature = p.top_p == 0.0f ? 0.0f : p.temperature;
    g.sampler.top_p = p.top_p == 0.0f ? 1.0f : p.top_p;
    g.sampler.seed = p.seed ? *p.seed : draw_seed();
    g.top_logprobs = p.logprobs ? p.top_logprobs : 0;
    g.resume_slot = p.id_slot;
    g.park = p.keep_slot;
    g.cache_salt = p.cache_salt;

    std::int32_t prev_token = g.prompt.empty() ? -1 : g.prompt.back();
    if (g.prompt.empty() && p.id_slot >= 0)
        for (const SlotInfo& s : engine.slots())
            if (s.id == p.id_slot) prev_token = s.last_token;
    auto channel = std::make_shared<Channel>(tokenizer, stops, prev_token);
    const SubmitResult r = engine.submit(std::move(g), [channel](const TokenEvent& e) { return channel->on_event(e); });
    switch (r.rejection) {
        case Rejection::none: break;
        case Rejection::queue_full: throw ApiError(503, r.message);
        case Rejection::never_fits: throw ApiError(400, r.message, "max_tokens");
        case Rejection::invalid: throw ApiError(400, r.message);
    }

    const ResponseHeader h{chat, fmt::format("{}-{}-{}", chat ? "chatcmpl" : "cmpl", id_prefix, r.request_id),
                           options.model_alias, std::int64_t(std::time(nullptr))};
    const std::uint64_t id = r.request_id;
    auto gone = [this, id, channel] {
        if (channel->first_to_see_gone() && engine.cancel(id)) count_disconnect();
        return false;
    };
    auto logprobs = [this, chat, want = p.logprobs](const std::vector<TokenText>& tokens, std::size_t offset) {
        return want ? logprobs_json(chat, tokens, offset, [this](std::int32_t t) { return piece_text(t); }) : json(nullptr);
    };
    auto release = [gone](bool success) {
        if (!success) gone();
    };

    if (!p.stream) {
        // Sent chunked: while the request waits, a space every second (JSON allows leading
        // whitespace) notices a client that went away, and its pages are freed at once.
        res.set_chunked_content_provider("application/json", [=](std::size_t, httplib::DataSink& sink) {
            std::string text;
            std::vector<TokenText> tokens;
            Channel::Final fin;
            for (auto wait = 2000ms;; wait = 1000ms) {
                std::vector<TextDelta> got;
                const bool done = channel->wait(wait, got, fin);
                for (TextDelta& d : got) {
                    text += d.text;
                    for (TokenText& t : d.tokens) tokens.push_back(std::move(t));
                }
                if (done) break;
                if (got.empty() && !sink.write(" ", 1)) return gone();
            }
            const json body = fin.finish == FinishReason::error
                                  ? ApiError(500, fin.error).to_json()
                                  : completion_json(h, text, finish_name(fin), logprobs(tokens, 0),
                                                    {fin.n_prompt, fin.n_generated});
            const std::string s = dump_json(body);
            if (!sink.write(s.data(), s.size())) return gone();
            sink.done();
            return true;
        }, release);
        return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [=](std::size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (chat && !send(sse_event(stream_chunk_json(h, "", nullptr, nullptr, true)))) return gone();
        std::size_t offset = 0;
        for (;;) {
            std::vector<TextDelta> got;
            Channel::Final fin;
            const bool done = channel->wait(1000ms, got, fin);
            if (got.empty() && !done && !send(": keep-alive\n\n")) return gone();
            for (const TextDelta& d : got) {
                if (d.text.empty() && !p.logprobs) continue;
                if (!send(sse_event(stream_chunk_json(h, d.text, logprobs(d.tokens, offset), nullptr)))) return gone();
                offset += d.text.size();
            }
            if (!done) continue;
            if (fin.finish == FinishReason::error) {
                send(sse_event(ApiError(500, fin.error).to_json()));
            } else {
                send(sse_event(stream_chunk_json(h, "", nullptr, finish_name(fin))));
                if (p.include_usage) send(sse_event(stream_usage_json(h, {fin.n_prompt, fin.n_generated})));
            }
            send(kSseDone);
            sink.done();
            return true;
        }
    }, release);
}

}  // namespace aqpim::serve
