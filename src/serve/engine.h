#pragma once
// The serving engine behind `aqpim serve` (docs/serve.md, "Scheduler and admission"): many
// concurrent generation requests over one model and one KV cache under a byte budget, advanced by
// one scheduler thread with continuous batching. No HTTP here: the server layer turns requests
// into GenerationRequest, forwards TokenEvents to its clients and reads stats() / slots().
//
// Scheduling: every step advances each decoding sequence by one token in one batched forward call,
// and prefills at most one chunk (prefill_chunk tokens) of one waiting prompt before it, so running
// streams keep a bounded time per token. Admission reserves the worst case of a request (its
// prompt + max_tokens at the peak bytes the scheme holds on the way there, every byte counted as
// `aqpim info` counts it); a request that does not fit now waits in a bounded FIFO queue, one that
// could never fit is rejected with the numbers. A running sequence is never evicted.
//
// Determinism: a request's tokens depend only on the request (prompt, parameters, seed) and the
// engine's options, never on what else runs: each sequence has its own Sampler, prompts are
// prefilled alone in chunks aligned to position 0, and decode uses the batch-invariant matmul
// (each row with the same arithmetic whatever the batch: MatmulPath::invariant).
//
// Threads: callbacks run on the scheduler thread (keep them short, never call back into a blocking
// engine method from one: submit and cancel are fine). Waits are condition variables, no spinning.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aqpim/kv_store.h"
#include "aqpim/model.h"
#include "aqpim/sampler.h"
#include "serve/json_constraint.h"
#include "serve/output_guide.h"
#include "serve/logit_processing.h"
#include "store/prefix_store.h"

namespace aqpim::serve {

struct EngineOptions {
    std::string kv = "pq";                  ///< --kv scheme (aqpim/kv_scheme.h)
    std::uint64_t kv_budget_bytes = 1ULL << 30;  ///< every KV byte of every sequence together
    int parallel = 64;                      ///< sequences active at once (slots 0 .. parallel-1)
    std::int64_t ctx = 0;                   ///< most tokens one sequence holds (0: the model's context)
    int threads = 0;                        ///< forward-pass threads (0: default_threads())
    int queue_capacity = 256;               ///< requests waiting for admission (one the next step admits does not count); beyond: queue_full
    int prefill_chunk = 256;                ///< prompt tokens prefilled per step
    std::int32_t eos_token = -1;            ///< sampling it ends a request with `stop` (-1: none)
    /// The KV store's tiers, searched in this order (aqpim/kv_store.h specs; empty: none): prompts
    /// restore their stored prefix blocks, prefills record theirs, and with a `disk:` tier parked
    /// sequences go to disk when the budget needs their room (docs/kv-store.md).
    std::vector<std::string> kv_store;
    int kv_store_block = store::kDefaultBlockTokens;     ///< tokens per stored block (a multiple of prefill_chunk)
    int kv_store_tail_every = store::kDefaultTailEvery;  ///< a block's tail is stored for every this many blocks (docs/kv-store.md)
    WarnFn warn;                            ///< warnings of the store (a dead Redis, a refused entry); may be empty
    /// The prompt cache (llama-server's cache_prompt): a finished sequence stays in its slot,
    /// `cached`, its bytes still counted, until admission needs the slot or the bytes (the least
    /// recently used goes first); a later prompt that begins with every token it holds continues
    /// it and prefills only the rest (docs/serve.md "Prompt cache").
    bool cache_prompt = true;

    /// Throws aqpim::Error naming the first bad field.
    void validate() const;
};

enum class FinishReason { none, stop, length, cancelled, error };
/// "stop", "length", "cancelled", "error" (none: "").
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
    std::int32_t token = -1;
    float logprob = 0.0f;  ///< natural log of the probability under the unscaled softmax of the logits
};

/// A prompt token with its log probability given the tokens before it (prompt_logprobs).
struct ScoredToken {
    std::int32_t token = -1;
    std::optional<float> logprob;     ///< absent: no row of this request predicted it (a sequence's first token)
    std::vector<TokenLogprob> top;    ///< the request's top_logprobs most likely tokens at its place, best first
};

/// One event of a request: a generated token (finish == none); with prompt_logprobs, first, the
/// prompt's scores (token == -1, finish == none, `prompt` holding every prompt token); and its
/// final event (token == -1, finish set, exactly once per accepted request, after its KV pages
/// are released).
struct TokenEvent {
    std::uint64_t request_id = 0;
    std::int32_t token = -1;
    float logprob = 0.0f;
    std::vector<TokenLogprob> top_logprobs;  ///< the request's top_logprobs most likely tokens, best first
    std::vector<ScoredToken> prompt;         ///< the prompt-scores event only
    FinishReason finish = FinishReason::none;
    int n_prompt = 0;                        ///< prompt tokens fed (usage)
    int n_generated = 0;                     ///< tokens generated so far (this one included)
    std::string error;                       ///< finish == error: what went wrong
    // On generated tokens and the final event of a request that started in a slot:
    int slot = -1;                           ///< the slot it runs in (-1: it never started)
    int n_prompt_fed = 0;                    ///< prompt tokens it prefilled (the others came from the KV store)
    double prompt_seconds = 0;               ///< from its start in the slot to its first token (or its end, without one)
};
/// Return true to stop the request now (a string stop the server found): it finishes with `stop`.
using EventCallback = std::function<bool(const TokenEvent&)>;

struct GenerationRequest {
    std::vector<std::int32_t> prompt;  ///< BOS included if wanted; may be empty only with resume_slot
    int max_tokens = 16;               ///< tokens to generate at most (finish `length`); 0 only with prompt_logprobs
    SamplerParams sampler;             ///< temperature, top_p, seed (ignored with resume_slot: the saved sampler)
    /// Bias, penalties, top_k, min_p before the sampler draws (frequency and presence count the
    /// tokens this request generates; the repetition window reaches into the prompt).
    LogitProcessing processing;
    /// Token sequences that end the request with `stop` when the output ends with one (the
    /// sequence's tokens are emitted).
    std::vector<std::vector<std::int32_t>> stop_sequences;
    int top_logprobs = 0;              ///< alternatives reported per token (0..20)
    /// Score the prompt: before its first token, the request sends one event with each prompt
    /// token's log probability given those before it (and top_logprobs alternatives), computed
    /// by its own prefill (all-row logits): no stored prefix is restored for it.
    bool prompt_logprobs = false;
    /// EOS is reported as a generated token (with its log probability) before the request ends, as
    /// llama-server counts it; otherwise it ends the request unreported (OpenAI's usage).
    bool report_eos = false;
    /// >= 0: continue the sequence parked in this slot (restore_slot, or an earlier request with
    /// park): prompt is appended to it and generation goes on with its saved sampler.
    int resume_slot = -1;
    /// Keep the finished sequence's KV in its slot (still counted in the budget) for save_slot or a
    /// later resume_slot, until release_slot.
    bool park = false;
    /// The KV store shares stored blocks only between requests with the same salt (empty: the
    /// unsalted space every request without one shares).
    std::string cache_salt;
    /// With EngineOptions::cache_prompt: continue a cached sequence this prompt begins with (same
    /// cache_salt; not with prompt_logprobs, which scores every prompt row), and leave this
    /// sequence cached when it ends. The tokens are then those of the conversation continued, not
    /// of a fresh prefill of the whole prompt (decode and prefill round differently). False: the
    /// whole prompt is prefilled (no KV store lookup either) and the sequence released at its end.
    bool cache_prompt = true;
    /// An output constraint's token texts: the generated text is kept a prefix of what the
    /// constraint accepts (mask_guided before each draw, before the processing above, so top_k
    /// and min_p choose among what it lets through) and the request ends with `stop` once nothing
    /// may follow. Without `regex`: JSON mode (one JSON object). Null: unconstrained. Not with
    /// resume_slot or park.
    std::shared_ptr<const GuideVocabulary> guide_vocabulary;
    /// JSON mode: the object must be one `json_schema` accepts (null: any object).
    std::shared_ptr<const JsonSchema> json_schema;
    /// Instead of JSON mode: the whole text must match `regex` (RegexDfa::Match::whole).
    std::shared_ptr<const RegexDfa> regex;
    /// Instead of JSON mode: the whole text must match `grammar` (a GBNF grammar's root).
    std::shared_ptr<const Grammar> grammar;
    /// A reasoning model's answer (OutputGuide::reason_first): where the prompt left it. Closed:
    /// the constraint holds from the first token; free or open: after the reasoning's </think>.
    ReasoningStart reasoning = ReasoningStart::closed;
};

enum class Rejection { none, queue_full, never_fits, invalid };

struct SubmitResult {
    std::uint64_t request_id = 0;       ///< valid when rejection == none
    Rejection rejection = Rejection::none;
    std::uint64_t needed_bytes = 0;     ///< never_fits: the request's worst case ...
    std::uint64_t budget_bytes = 0;     ///< ... and the budget
    std::string message;                ///< rejected: one line naming the reason and the numbers
    bool ok() const { return rejection == Rejection::none; }
};

/// Fixed-bucket histogram (Prometheus style): counts[i] samples <= bounds[i], the last bucket +Inf.
struct Histogram {
    std::vector<double> bounds;         ///< upper bounds in seconds, increasing
    std::vector<std::uint64_t> counts;  ///< [bounds.size() + 1], not cumulative
    double sum = 0.0;
    std::uint64_t count = 0;
    void observe(double x);
};

/// The KV store's counters (docs/kv-store.md); `prefix` is empty without --kv-store.
struct StoreStats {
    std::optional<store::PrefixStoreStats> prefix;
    std::uint64_t restore_refused = 0;  ///< chains found whose state the cache refused or whose tokens differed
    std::uint64_t spills = 0, unspills = 0;                  ///< parked sequences moved to disk and back
    std::uint64_t spilled_sequences = 0, spilled_bytes = 0;  ///< parked sequences on disk now
};

/// The prompt cache's counters (EngineOptions::cache_prompt).
struct PromptCacheStats {
    std::uint64_t hits = 0;           ///< requests that continued a cached sequence
    std::uint64_t tokens_reused = 0;  ///< prompt tokens those requests did not prefill
    std::uint64_t evictions = 0;      ///< cached sequences dropped for admission's room
    int sequences = 0;                ///< cached sequences now
    std::uint64_t bytes_reserved = 0; ///< their reservations (part of kv_bytes_reserved)
    // With a disk tier (--kv-store disk:DIR), dropped sequences go to disk:
    std::uint64_t disk_writes = 0;     ///< cached sequences written to disk when admission dropped them
    std::uint64_t disk_hits = 0;       ///< of `hits`, those that brought their sequence back from disk
    std::uint64_t disk_evictions = 0;  ///< sequences on disk dropped for the disk tier's BYTES
    std::uint64_t disk_write_failures = 0;  ///< dropped sequences not written (no room in BYTES or on the disk)
    std::uint64_t disk_sequences = 0, disk_bytes = 0;  ///< on disk now
};

struct EngineStats {
    std::uint64_t requests_accepted = 0, requests_rejected = 0, requests_finished = 0;
    std::uint64_t prompt_tokens = 0, generated_tokens = 0;
    int active = 0, queued = 0;
    std::uint64_t kv_bytes_used = 0;      ///< what the cache holds (KvCache::memory())
    std::uint64_t kv_bytes_reserved = 0;  ///< admitted requests' worst cases
    std::uint64_t kv_budget_bytes = 0;
    std::int64_t pages_in_use = 0;        ///< code pages of every sequence (paged schemes; 0 otherwise)
    double bits_per_element = 0.0;        ///< of what the cache holds now
    /// Scratch kept between steps, outside the KV budget: the forward pass's threads'
    /// (Transformer::scratch_bytes) and the cache's (KvCache::scratch_bytes).
    std::uint64_t model_scratch_bytes = 0, cache_scratch_bytes = 0;
    double prefill_seconds = 0.0, decode_seconds = 0.0;  ///< time spent in each phase
    std::uint64_t prefill_tokens = 0, decode_tokens = 0; ///< tokens through each phase
    Histogram ttft, tpot;                 ///< time to first token, time per output token (seconds)
    StoreStats store;
    PromptCacheStats prompt_cache;
};

/// fetch: its prompt's stored blocks are being looked up; spilled: parked, its KV on disk;
/// cached: a finished sequence kept for the prompt cache (dropped when admission needs the room).
enum class SlotPhase { idle, fetch, prefill, decode, parked, spilled, cached };
struct SlotInfo {
    int id = 0;
    SlotPhase phase = SlotPhase::idle;
    std::uint64_t request_id = 0;
    int n_prompt = 0, n_generated = 0, max_tokens = 0;
    std::int64_t n_cached = 0;         ///< tokens in the cache
    std::uint64_t kv_bytes_reserved = 0;
    std::int32_t last_token = -1;      ///< the sequence's last token (-1: none); text continues after it
};
const char* slot_phase_name(SlotPhase p);

class Engine {
public:
    /// `weights` must outlive the engine. Starts the scheduler thread.
    Engine(const ModelWeights& weights, const EngineOptions& options);
    ~Engine();  ///< cancels everything, joins the scheduler
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    /// Queue a request; on_event then receives its tokens and its final event (scheduler thread).
    SubmitResult submit(GenerationRequest request, EventCallback on_event);
    /// Queue several requests at once, all or none (the choices of one HTTP request): every one is
    /// accepted, in order, or every result carries the same rejection (the first invalid or
    /// never-fitting request's; queue_full when they do not all fit the queue now; invalid when
    /// they are more than the queue could ever hold).
    std::vector<SubmitResult> submit_all(std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks);
    /// Stop a queued or running request: it finishes with `cancelled` and its pages are released
    /// before the next step. Unknown or finished id: false.
    bool cancel(std::uint64_t request_id);

    EngineStats stats() const;
    std::vector<SlotInfo> slots() const;

    /// Write the sequence of slot id (running: as of the last step; parked) to path
    /// (aqpim/kv_state.h format). Blocks until done; throws aqpim::Error (idle slot, I/O).
    void save_slot(int slot_id, const std::string& path);
    /// Load a state file into slot id (idle, or cached: then dropped first), parked (its bytes reserved; too big for the budget now:
    /// aqpim::Error naming the numbers). Blocks until done.
    void restore_slot(int slot_id, const std::string& path);
    /// Free a parked or cached slot. Blocks until done.
    void release_slot(int slot_id);

    const EngineOptions& options() const;
    /// Worst-case bytes a sequence of n tokens reserves (the admission arithmetic).
    std::uint64_t reservation_bytes(std::int64_t n_tokens) const;
    /// Wait until the KV store's queued block writes are done (tests, benchmarks).
    void flush_store();
    /// Bytes each store tier itself accounts for the entries of `prompt`'s whole blocks (Redis:
    /// MEMORY USAGE), in tier order; empty without a store.
    std::vector<std::uint64_t> store_reported_bytes(std::span<const std::int32_t> prompt);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace aqpim::serve
