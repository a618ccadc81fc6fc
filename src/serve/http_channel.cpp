// A request's way from the engine's scheduler thread to its connection's thread (http_impl.h):
// its text released as it can no longer change, its end, and what it took.

#include "serve/http_impl.h"

#include <utility>

namespace aqpim::serve {

std::uint64_t Wakeup::generation() {
    std::lock_guard<std::mutex> lk(mu_);
    return generation_;
}

void Wakeup::notify() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++generation_;
    }
    cv_.notify_all();
}

bool Wakeup::wait_until(std::uint64_t seen, std::chrono::steady_clock::time_point until) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_until(lk, until, [&] { return generation_ != seen; });
}

Channel::Channel(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::string> stops, std::int32_t prev_token,
                 std::shared_ptr<Wakeup> wakeup, const TextLimits& limits, bool per_token)
    : text_(tokenizer, std::move(stops), prev_token),
      tokenizer_(std::move(tokenizer)),
      prev_token_(prev_token),
      per_token_(per_token),
      wakeup_(std::move(wakeup)),
      max_predict_(limits.max_predict) {
    text_.set_min_indent(limits.min_indent);
}

bool Channel::on_event(const TokenEvent& e) {
    if (e.finish == FinishReason::none && e.token < 0) {  // the prompt's scores
        {
            std::lock_guard<std::mutex> lk(mu_);
            prompt_ = e.prompt;
        }
        wakeup_->notify();
        return false;
    }
    const auto now = std::chrono::steady_clock::now();
    const bool last = e.finish != FinishReason::none;
    if (!last && e.n_generated == 1) first_token_ = now;
    TextDelta d = last ? text_.flush() : text_.push(e);
    if (per_token_ && last) {
        d.tokens.clear();  // each was reported with its own event
    } else if (per_token_) {  // the raw piece: its bytes are reported as they are
        const std::int32_t prev = std::exchange(prev_token_, e.token);
        d.tokens = {TokenText{e.token, tokenizer_->piece(prev, e.token), e.logprob, e.top_logprobs, true, prev}};
    }
    // t_max_predict_ms: past the time since the first token, the token after one that wrote a new
    // line is the last (llama-server looks at the new line before taking the next token).
    const bool out_of_time = !last && max_predict_.count() > 0 && saw_new_line_ && now - first_token_ > max_predict_;
    saw_new_line_ = saw_new_line_ || d.text.find('\n') != std::string::npos;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!d.empty()) deltas_.push_back(std::move(d));
        if (out_of_time) stopped_by_time_ = true;
        if (!last && e.n_generated == 1) started_ = Progress{e.slot, e.n_prompt_fed, e.prompt_seconds, 0.0};
        if (last) {
            done_ = true;
            final_.finish = e.finish;
            final_.stopped_by_text = text_.stopped();
            final_.stop_word = text_.stop_word();
            final_.stopped_by_limit = text_.stopped_by_indent() || stopped_by_time_;
            final_.n_prompt = e.n_prompt;
            final_.n_generated = e.n_generated;
            final_.error = e.error;
            final_.slot = e.slot;
            final_.n_prompt_fed = e.n_prompt_fed;
            final_.prompt_seconds = e.prompt_seconds;
            final_.predicted_seconds = e.n_generated > 0 ? std::chrono::duration<double>(now - first_token_).count() : 0.0;
        }
    }
    wakeup_->notify();
    return !last && (text_.stopped() || out_of_time);
}

bool Channel::poll(std::vector<TextDelta>& out, Final& final) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& d : deltas_) out.push_back(std::move(d));
    deltas_.clear();
    if (done_) final = final_;
    return done_;
}

bool Channel::wait(std::chrono::milliseconds timeout, std::vector<TextDelta>& out, Final& final) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        const std::uint64_t seen = wakeup_->generation();  // before looking: an event after it wakes us
        const bool done = poll(out, final);
        if (done || !out.empty() || std::chrono::steady_clock::now() >= until || !wakeup_->wait_until(seen, until))
            return done;
    }
}

std::optional<Channel::Progress> Channel::progress() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!started_) return std::nullopt;
    Progress p = *started_;
    p.predicted_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_token_).count();
    return p;
}

std::optional<std::vector<ScoredToken>> Channel::prompt_scores() {
    std::lock_guard<std::mutex> lk(mu_);
    return prompt_;
}

bool read_whole_choice(Channel& channel, httplib::DataSink& sink, std::string& text, std::vector<TokenText>& tokens,
                       Channel::Final& fin) {
    using namespace std::chrono_literals;
    // A space every second whether or not text came: a client gone while tokens keep coming is
    // noticed too.
    auto next_space = std::chrono::steady_clock::now() + 2000ms;
    for (;;) {
        std::vector<TextDelta> got;
        const bool done = channel.wait(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::max<std::chrono::steady_clock::duration>(next_space - std::chrono::steady_clock::now(), 0ms)),
                                       got, fin);
        for (TextDelta& d : got) {
            text += d.text;
            for (TokenText& t : d.tokens) tokens.push_back(std::move(t));
        }
        if (done) return true;
        if (std::chrono::steady_clock::now() >= next_space) {
            if (!sink.write(" ", 1)) return false;
            next_space = std::chrono::steady_clock::now() + 1000ms;
        }
    }
}

bool write_last(httplib::DataSink& sink, const std::string& s) {
    if (!sink.write(s.data(), s.size())) return false;
    sink.done();
    return true;
}

void start_event_stream(httplib::Response& res, httplib::ContentProviderWithoutLength provider,
                        httplib::ContentProviderResourceReleaser release) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(release));
}

}  // namespace aqpim::serve
