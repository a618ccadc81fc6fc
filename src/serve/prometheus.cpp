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

/// A label value as the text format wants it: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

/// A metric with one sample per tier, labelled by tier kind and spec.
void per_tier(std::string& out, const char* name, const char* type, const char* help,
              const std::vector<KvStoreStats>& tiers, double (*value)(const KvStoreStats&)) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
    for (const KvStoreStats& t : tiers)
        out += fmt::format("{}{{tier=\"{}\",where=\"{}\"}} {}\n", name, t.tier, label_value(t.where), value(t));
}

void store_metrics(std::string& out, const StoreStats& s) {
    if (s.prefix) {
        const store::PrefixStoreStats& p = *s.prefix;
        metric(out, "aqpim_kv_store_lookups_total", "counter", "Prompts looked up in the KV prefix store.", double(p.lookups));
        metric(out, "aqpim_kv_store_lookup_hits_total", "counter", "Lookups that restored at least one block.",
               double(p.lookup_hits));
        metric(out, "aqpim_kv_store_hit_ratio", "gauge", "Lookups that restored at least one block, over all lookups.",
               p.lookups > 0 ? double(p.lookup_hits) / double(p.lookups) : 0.0);
        metric(out, "aqpim_kv_store_blocks_restored_total", "counter", "Blocks restored instead of prefilled.",
               double(p.blocks_restored));
        metric(out, "aqpim_kv_store_tokens_restored_total", "counter", "Prompt tokens restored instead of prefilled.",
               double(p.tokens_restored));
        metric(out, "aqpim_kv_store_bytes_fetched_total", "counter", "Entry bytes read to restore blocks.",
               double(p.bytes_fetched));
        metric(out, "aqpim_kv_store_blocks_stored_total", "counter", "Blocks written to the store.", double(p.blocks_stored));
        metric(out, "aqpim_kv_store_bytes_stored_total", "counter", "Entry bytes of the blocks written (once per block).",
               double(p.bytes_stored));
        out += "# HELP aqpim_kv_store_rejected_total Entries ignored as corrupt or foreign.\n"
               "# TYPE aqpim_kv_store_rejected_total counter\n";
        out += fmt::format("aqpim_kv_store_rejected_total{{reason=\"corrupt\"}} {}\n", p.rejected_corrupt);
        out += fmt::format("aqpim_kv_store_rejected_total{{reason=\"foreign\"}} {}\n", p.rejected_foreign + s.restore_refused);
        metric(out, "aqpim_kv_store_inconsistent_blocks_total", "counter",
               "Chains ended before a block written against another split of its parent (racing writers).",
               double(p.inconsistent));
        metric(out, "aqpim_kv_store_recordings_dropped_total", "counter", "Block states not written: the write queue was full.",
               double(p.recordings_dropped));
        per_tier(out, "aqpim_kv_store_tier_bytes", "gauge", "Bytes a tier holds (redis: what this server stored there).",
                 p.tiers, [](const KvStoreStats& t) { return double(t.bytes); });
        per_tier(out, "aqpim_kv_store_tier_entries", "gauge", "Entries a tier holds.", p.tiers,
                 [](const KvStoreStats& t) { return double(t.entries); });
        per_tier(out, "aqpim_kv_store_tier_hits_total", "counter", "Entries found in a tier.", p.tiers,
                 [](const KvStoreStats& t) { return double(t.hits); });
        per_tier(out, "aqpim_kv_store_tier_misses_total", "counter", "Entries not found in a tier.", p.tiers,
                 [](const KvStoreStats& t) { return double(t.misses); });
        per_tier(out, "aqpim_kv_store_tier_hit_ratio", "gauge", "Entries found over entries looked up, per tier.", p.tiers,
                 [](const KvStoreStats& t) { return t.hits + t.misses > 0 ? double(t.hits) / double(t.hits + t.misses) : 0.0; });
        per_tier(out, "aqpim_kv_store_tier_evictions_total", "counter", "Entries a tier dropped for room.", p.tiers,
                 [](const KvStoreStats& t) { return double(t.evictions); });
        per_tier(out, "aqpim_kv_store_tier_errors_total", "counter", "Failed operations of a tier (unreachable, I/O).", p.tiers,
                 [](const KvStoreStats& t) { return double(t.errors); });
        per_tier(out, "aqpim_kv_store_tier_up", "gauge", "1 when the tier's last operation reached it.", p.tiers,
                 [](const KvStoreStats& t) { return t.available ? 1.0 : 0.0; });
    }
    metric(out, "aqpim_kv_spilled_sequences", "gauge", "Parked sequences whose KV is on disk.", double(s.spilled_sequences));
    metric(out, "aqpim_kv_spilled_bytes", "gauge", "Bytes of parked sequences on disk.", double(s.spilled_bytes));
    metric(out, "aqpim_kv_spills_total", "counter", "Parked sequences moved to disk to make room.", double(s.spills));
    metric(out, "aqpim_kv_unspills_total", "counter", "Parked sequences read back from disk.", double(s.unspills));
}

void prompt_cache_metrics(std::string& out, const PromptCacheStats& c) {
    const struct {
        const char *name, *type, *help;
        double value;
    } rows[] = {
        {"aqpim_prompt_cache_hits_total", "counter", "Requests that continued a cached sequence.", double(c.hits)},
        {"aqpim_prompt_cache_tokens_total", "counter", "Prompt tokens taken from cached sequences, not prefilled.",
         double(c.tokens_reused)},
        {"aqpim_prompt_cache_evictions_total", "counter", "Cached sequences dropped to admit a request.", double(c.evictions)},
        {"aqpim_prompt_cache_sequences", "gauge", "Finished sequences kept in their slots (the prompt cache).",
         double(c.sequences)},
        {"aqpim_prompt_cache_bytes_reserved", "gauge",
         "Reservations of the cached sequences (part of aqpim_kv_bytes_reserved).", double(c.bytes_reserved)},
        {"aqpim_prompt_cache_disk_writes_total", "counter",
         "Cached sequences written to the disk tier when admission dropped them.", double(c.disk_writes)},
        {"aqpim_prompt_cache_disk_write_failures_total", "counter",
         "Cached sequences dropped without a copy on disk (no room in the tier's bytes or on the disk).",
         double(c.disk_write_failures)},
        {"aqpim_prompt_cache_disk_hits_total", "counter", "Requests that continued a cached sequence read back from disk.",
         double(c.disk_hits)},
        {"aqpim_prompt_cache_disk_evictions_total", "counter", "Cached sequences on disk dropped for the disk tier's bytes.",
         double(c.disk_evictions)},
        {"aqpim_prompt_cache_disk_sequences", "gauge", "Cached sequences on disk.", double(c.disk_sequences)},
        {"aqpim_prompt_cache_disk_bytes", "gauge", "Bytes of the cached sequences on disk.", double(c.disk_bytes)},
    };
    for (const auto& r : rows) metric(out, r.name, r.type, r.help, r.value);
}

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
    out += "# HELP aqpim_scratch_bytes Scratch kept between steps, outside the KV budget: the forward pass's "
           "threads' (attention tiles and tables, weight panels, prepared activations) and the KV cache's "
           "(training rows, encode buffers).\n"
           "# TYPE aqpim_scratch_bytes gauge\n";
    out += fmt::format("aqpim_scratch_bytes{{part=\"model\"}} {}\n", s.model_scratch_bytes);
    out += fmt::format("aqpim_scratch_bytes{{part=\"kv_cache\"}} {}\n", s.cache_scratch_bytes);
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
    prompt_cache_metrics(out, s.prompt_cache);
    store_metrics(out, s.store);
    return out;
}

}  // namespace aqpim::serve
