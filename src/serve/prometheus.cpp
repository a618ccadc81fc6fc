#include "serve/prometheus.h"

#include <fmt/format.h>

namespace aqpim::serve {

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < h.bounds.size(); ++i) {
        cumulative += i < h.counts.size() ? h.counts[i] : 0;
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cumulative);
    }
    out += fmt::format("{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {1}\n", name, h.count, h.sum);
}

double rate(std::uint64_t tokens, double seconds) { return seconds > 0 ? double(tokens) / seconds : 0.0; }

}  // namespace

std::string prometheus_text(const EngineStats& s, const HttpCounters& http) {
    std::string out;
    out += "# HELP aqpim_requests_total Generation requests by outcome.\n# TYPE aqpim_requests_total counter\n";
    out += fmt::format("aqpim_requests_total{{outcome=\"accepted\"}} {}\n", s.requests_accepted);
    out += fmt::format("aqpim_requests_total{{outcome=\"rejected\"}} {}\n", s.requests_rejected);
    out += fmt::format("aqpim_requests_total{{outcome=\"finished\"}} {}\n", s.requests_finished);
    metric(out, "aqpim_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", double(s.prompt_tokens));
    metric(out, "aqpim_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
    metric(out, "aqpim_sequences_active", "gauge", "Sequences prefilling or decoding.", s.active);
    metric(out, "aqpim_sequences_queued", "gauge", "Requests waiting for admission.", s.queued);
    metric(out, "aqpim_kv_bytes_used", "gauge", "Bytes the KV cache holds (every sequence, as aqpim info counts).",
           double(s.kv_bytes_used));
    metric(out, "aqpim_kv_bytes_reserved", "gauge", "Worst-case bytes reserved by admitted requests.",
           double(s.kv_bytes_reserved));
    metric(out, "aqpim_kv_budget_bytes", "gauge", "The KV budget (--kv-budget).", double(s.kv_budget_bytes));
    metric(out, "aqpim_kv_pages_in_use", "gauge", "Code pages of every sequence (paged schemes).", double(s.pages_in_use));
    metric(out, "aqpim_kv_bits_per_element", "gauge", "Bits per cached K/V element of what is held now.",
           s.bits_per_element);
    metric(out, "aqpim_prefill_tokens_total", "counter", "Prompt tokens through prefill.", double(s.prefill_tokens));
    metric(out, "aqpim_decode_tokens_total", "counter", "Tokens through batched decode.", double(s.decode_tokens));
    metric(out, "aqpim_prefill_tokens_per_second", "gauge", "Prefill tokens per second spent prefilling.",
           rate(s.prefill_tokens, s.prefill_seconds));
    metric(out, "aqpim_decode_tokens_per_second", "gauge", "Decode tokens per second spent decoding (all sequences).",
           rate(s.decode_tokens, s.decode_seconds));
    histogram(out, "aqpim_time_to_first_token_seconds", "From submission to the first generated token.", s.ttft);
    histogram(out, "aqpim_time_per_output_token_seconds", "Between consecutive tokens of a request.", s.tpot);
    out += "# HELP aqpim_http_responses_total HTTP responses by status.\n# TYPE aqpim_http_responses_total counter\n";
    for (const auto& [status, n] : http.responses_by_status)
        out += fmt::format("aqpim_http_responses_total{{status=\"{}\"}} {}\n", status, n);
    metric(out, "aqpim_http_disconnects_total", "counter", "Requests cancelled because the client went away.",
           double(http.disconnects));
    return out;
}

}  // namespace aqpim::serve
