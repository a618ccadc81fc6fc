#pragma once
// The quality harness behind `aqpim eval` (docs/eval.md): the same text or prompt through several KV
// cache schemes, each compared with the f16 cache as the reference.
//
//   evaluate_quality   llama.cpp's perplexity chunks; per scheme perplexity, delta vs f16, mean
//                      KL(p_f16 || p_scheme) and top-1 agreement over the scored tokens, bits/element
//                      and KV bytes at the context, tokens/s
//   check_generation   greedy decoding after a prompt, every scheme teacher-forced on f16's tokens:
//                      first step where its greedy choice differs, KL per window of steps
//   measure_fidelity   one layer's KV head recorded by a cache decorator: attention-output error
//                      against exact attention over the recorded f32 keys and values, by position bin
//
// Everything goes through the KvCache interface only, so every scheme make_kv_cache() knows works
// without special cases. Batched calls are used where the time-consistency contract of KvCache makes
// them equal to token-by-token decoding (tests/eval/test_quality_eval.cpp checks that per scheme).

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/retrieval.h"
#include "aqpim/sampler.h"
#include "aqpim/transformer.h"

namespace aqpim {

// ---- schemes and the reference -----------------------------------------------------------------------

/// The schemes of a run: `schemes` with the f16 reference put first when no plain "f16" is listed.
/// Returns the index of the reference (the first plain "f16").
std::vector<KvSchemeSpec> with_f16_reference(std::vector<KvSchemeSpec> schemes, int* reference_index);

/// Build each scheme's cache once for `shape`, so that a bad scheme or parameter fails (aqpim::Error)
/// before any work is done.
void check_kv_schemes(const std::vector<KvSchemeSpec>& schemes, const KvShape& shape, const KvCacheOptions& options);

/// KL(p || q) in nats, p = softmax(ref), q = softmax(other), rows of n_vocab logits; ref_lse is
/// log Σ exp(ref) (pass NAN to have it computed). Exactly 0 when the rows are equal.
double kl_divergence(const float* ref, double ref_lse, const float* other, int n_vocab);
/// log Σ_i exp(logits[i]) in double.
double log_sum_exp(const float* logits, int n_vocab);

// ---- one chunk, as the harness runs it ---------------------------------------------------------------

enum class ScoredRows {
    batched,         ///< the scored rows in one forward call (what the harness does)
    token_by_token,  ///< one forward call per token (the decoding the batched call must equal)
};

/// Run `chunk` through `cache` (sequence 0 added here, cache empty): tokens [0, n_prefill) in one
/// forward call, then tokens [n_prefill, n) as `rows` says. logits gets [n - n_prefill][n_vocab]:
/// row r holds the logits after token n_prefill + r. Returns the seconds spent in forward calls.
double run_chunk(Transformer& model, KvCache& cache, std::span<const std::int32_t> chunk, int n_prefill,
                 ScoredRows rows, std::vector<float>& logits);

// ---- perplexity, KL and top-1 per scheme ----------------------------------------------------------------

struct QualityOptions {
    int n_ctx = 512;
    int max_chunks = 0;                ///< 0: every full chunk of the text
    std::uint64_t memory_budget = 0;   ///< KvCacheOptions::memory_budget of every cache (0 = unlimited)
    /// Called after each chunk with (chunks done, chunks total).
    std::function<void(int, int)> progress;
};

struct SchemeQuality {
    std::string spec;              ///< as the user wrote it ("pq:m=32")
    std::string scheme;            ///< as the cache names itself (KvCache::scheme())
    bool reference = false;        ///< the f16 run the others are compared with
    double ppl = 0, ppl_error = 0, mean_nll = 0;
    double delta_ppl_pct = 0;      ///< 100 * (ppl / ppl_f16 - 1)
    double mean_kl = 0;            ///< mean over scored tokens of KL(p_f16 || p_scheme), nats
    double kl_error = 0;           ///< stddev(KL) / sqrt(count - 1)
    double max_kl = 0;
    double top1 = 0;               ///< fraction of scored tokens whose argmax equals f16's
    double top1_error = 0;         ///< sqrt(top1 (1 - top1) / (count - 1))
    double bits_per_element = 0;   ///< KvMemory::bits_per_element of the cache after a chunk (n_ctx tokens)
    std::uint64_t kv_bytes = 0;    ///< every byte the cache held after a chunk (largest over chunks)
    std::vector<std::pair<std::string, std::uint64_t>> kv_parts;  ///< those bytes by part
    /// Most bytes one sequence holds on its way to n_ctx tokens (KvCache::sequence_bytes over
    /// 1..n_ctx): a PQ cache with refresh holds a version's training rows uncoded until it trains, so
    /// positions inside the chunk may be served by more bytes than the cache holds at n_ctx.
    std::uint64_t peak_kv_bytes = 0;
    double peak_bits_per_element = 0;  ///< peak_kv_bytes per element of n_ctx tokens
    double seconds = 0;            ///< in forward calls (prefill + scored half), all chunks
    double tokens_per_s = 0;       ///< n_ctx * n_chunks / seconds
    /// `eval -f TEXT --needles`: planted needles (plant_needles, aqpim/retrieval.h) at the chunk's
    /// context: queries, and those whose weight on the needle the scheme kept (0 queries: not run).
    int needles_n = 0, needles_kept = 0;
};

struct QualityReport {
    int n_ctx = 0;
    int n_chunks = 0;
    std::int64_t n_text_tokens = 0;
    std::int64_t n_scored = 0;     ///< tokens scored per scheme
    KvShape shape;
    std::vector<SchemeQuality> schemes;  ///< reference first when it was added, else in the order given
};

/// `tokens` is the tokenized text with BOS first; `bos` the id chunks start with. An f16 reference is
/// added when `schemes` lists no plain "f16". Per chunk, each scheme gets a fresh cache, the unscored
/// first half is prefilled in one forward call and the scored second half runs as one batched call.
QualityReport evaluate_quality(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                               const std::vector<KvSchemeSpec>& schemes, const QualityOptions& options);

// ---- long generation ------------------------------------------------------------------------------------

struct GenerationCheckOptions {
    int n_generate = 256;  ///< greedy steps after the prompt
    int window = 32;       ///< steps per KL window
};

struct SchemeGeneration {
    std::string spec, scheme;
    bool reference = false;
    /// Greedy choice at each step, teacher-forced: step t's input is f16's token of step t - 1.
    std::vector<std::int32_t> tokens;
    int first_divergence = -1;        ///< first step whose greedy token differs from f16's (-1: none)
    double mean_kl = 0;               ///< mean over steps of KL(p_f16 || p_scheme)
    double max_kl = 0;
    double top1 = 0;                  ///< fraction of steps agreeing with f16's greedy token
    std::vector<double> window_kl;    ///< mean KL of steps [w * window, (w + 1) * window)
    std::vector<double> window_top1;  ///< top-1 agreement of the same steps
    double bits_per_element = 0;      ///< of the cache at the end (prompt + n_generate - 1 tokens)
    std::uint64_t kv_bytes = 0;
    double prefill_seconds = 0;       ///< the prompt's forward call
    double decode_seconds = 0;        ///< the n_generate - 1 single-token forward calls
};

struct GenerationReport {
    int n_prompt = 0;
    int n_generate = 0;
    int window = 0;
    std::vector<SchemeGeneration> schemes;  ///< reference first when it was added
};

/// Greedy decoding of options.n_generate tokens after `prompt` (non-empty, BOS included if wanted)
/// with every scheme in lock step: the f16 reference picks each token; every scheme is fed the same
/// token (teacher forcing), so its KL stays comparable after its own greedy choice has diverged.
GenerationReport check_generation(Transformer& model, const std::vector<std::int32_t>& prompt,
                                  const std::vector<KvSchemeSpec>& schemes, const GenerationCheckOptions& options);

// ---- attention fidelity of one KV head -------------------------------------------------------------

/// A KvCache decorator: every call goes to `inner`; for layer `il`, KV head `ih` of every sequence it
/// also records the keys and values appended (f32, as the model produced them), and for each attend()
/// row the queries, position, scale and the output `inner` returned. Works for any scheme.
class RecordingKvCache final : public KvCache {
public:
    /// Optional: rewrites the recorded head's value row v [head_dim] of the token at position `pos`
    /// before `inner` sees it (the attention-weight probe of measure_fidelity). The recorded values
    /// stay the model's.
    using ValueProbe = std::function<void(std::int64_t pos, float* v)>;

    RecordingKvCache(std::unique_ptr<KvCache> inner, int il, int ih, ValueProbe probe = {});

    struct Row {
        int seq_id = 0;
        std::int64_t pos = 0;
        float scale = 1.0f;
        std::vector<float> q;    ///< [group][head_dim]
        std::vector<float> out;  ///< [group][head_dim] what the inner cache answered
    };
    /// Keys and values appended to the recorded layer/head of a sequence: [n_tokens][head_dim].
    const std::vector<float>& keys(int seq_id) const { return recorded(seq_id).k; }
    const std::vector<float>& values(int seq_id) const { return recorded(seq_id).v; }
    /// Every recorded attend() row, in call order (rows of one call in order).
    const std::vector<Row>& rows() const { return rows_; }
    const KvCache& inner() const { return *inner_; }

    std::string scheme() const override { return inner_->scheme(); }
    void add_sequence(int seq_id) override { inner_->add_sequence(seq_id); }
    void remove_sequence(int seq_id) override { inner_->remove_sequence(seq_id); }
    bool has_sequence(int seq_id) const override { return inner_->has_sequence(seq_id); }
    std::int64_t n_tokens(int seq_id, int il) const override { return inner_->n_tokens(seq_id, il); }
    void append(int il, int seq_id, std::int64_t n, const float* k, const float* v) override;
    void attend(int il, int seq_id, int ih, const KvQuery& query) const override;
    KvMemory memory() const override { return inner_->memory(); }

private:
    struct Recorded {
        std::vector<float> k, v;  ///< [n_tokens][head_dim]
    };
    const Recorded& recorded(int seq_id) const;

    std::unique_ptr<KvCache> inner_;
    int il_, ih_;
    ValueProbe probe_;
    std::vector<std::pair<int, Recorded>> seqs_;
    std::vector<float> scratch_;     ///< values with the probe applied: [n][n_kv_head][head_dim]
    mutable std::mutex rows_mutex_;  ///< attend() of different sequences may run concurrently
    mutable std::vector<Row> rows_;
};

struct FidelityOptions {
    int layer = 0;
    int head = 0;     ///< KV head; its whole GQA group of query heads is measured
    int n_ctx = 512;  ///< tokens of the text's first chunk (BOS first), run as the harness runs a chunk
    int n_bins = 8;   ///< query-position bins of equal width over [0, n_ctx)
    bool probe = true;  ///< also read the scheme's attention weights (ceil(n_ctx / P) + 1 more runs)
    /// P, tokens per probe block (<= head_dim; 0: min(head_dim, 16)); a scheme learning its value
    /// storage from its first tokens (pq: calib - sinks of them) must see at least P of them.
    int probe_block = 0;
};

/// Errors of the query rows (x query heads of the group) whose position falls in [pos_begin, pos_end).
struct FidelityBin {
    std::int64_t pos_begin = 0, pos_end = 0;
    std::int64_t n_rows = 0;        ///< rows x query heads
    double out_rel_err = 0;         ///< mean of ||o_scheme - o|| / ||o||
    double out_rel_err_max = 0;
    /// sqrt(Σ a (Δs - mean_a Δs)^2 / Σ a (s - mean_a s)^2): Δs = s_scheme - s over each row's tokens,
    /// weighted by the exact attention weights a, sums over the bin's rows; NaN when the weights probe
    /// did not run or failed.
    double score_rel_rmse = 0;
    double attn_kl = 0;             ///< mean KL(a || a_scheme) of the attention weights; NaN as above
};

struct SchemeFidelity {
    std::string spec, scheme;
    FidelityBin all;                ///< every row
    std::vector<FidelityBin> bins;
    bool probe_ok = false;          ///< attention weights measured (score_rel_rmse, attn_kl valid)
    std::string probe_note;         ///< why not, when not
    /// The retrieval view over every row and query head (aqpim/retrieval.h; reference: exact attention
    /// over the recorded f32 keys); set when the weights were read (probe_ok).
    std::optional<RetrievalCounter> retrieval;
};

struct FidelityReport {
    int layer = 0, head = 0, group = 1, head_dim = 0, n_ctx = 0, n_probe_runs = 0, probe_block = 0;
    std::vector<SchemeFidelity> schemes;  ///< in the order given (the reference is exact attention)
};

/// Run the first n_ctx tokens of `tokens` (BOS first) through each scheme wrapped in a
/// RecordingKvCache as the harness runs a chunk, and compare every recorded attention row of (layer,
/// head) with exact attention in double precision over the recorded f32 keys and values of the same
/// run. With options.probe, the scheme's attention weights are read by probe runs that pass one-hot
/// values to the recorded head (docs/eval.md says when that is exact and how it is checked).
FidelityReport measure_fidelity(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                                const std::vector<KvSchemeSpec>& schemes, const FidelityOptions& options);

// ---- reports ------------------------------------------------------------------------------------------

/// Aligned text table (one row per scheme), JSON and CSV of a quality report. `meta` adds fields
/// (model, file) to the JSON's top level.
std::string quality_table(const QualityReport& report);
std::string quality_json(const QualityReport& report, const std::vector<std::pair<std::string, std::string>>& meta);
std::string quality_csv(const QualityReport& report);

std::string generation_table(const GenerationReport& report);
std::string generation_json(const GenerationReport& report,
                            const std::vector<std::pair<std::string, std::string>>& meta);
std::string generation_csv(const GenerationReport& report);

std::string fidelity_table(const FidelityReport& report);
std::string fidelity_json(const FidelityReport& report, const std::vector<std::pair<std::string, std::string>>& meta);
std::string fidelity_csv(const FidelityReport& report);

}  // namespace aqpim
