#pragma once
// Long-range retrieval measurements (docs/eval.md, "Retrieval"):
//
//   RetrievalCounter   the retrieval view of `eval --fidelity`: over query rows where the reference
//                      attention puts >= min_weight on one earlier token, how often a scheme keeps
//                      that argmax and the token's weight within a tolerance, by distance back
//   plant_needles      synthetic K/V at long contexts (1K-128K) with one key far back, queried by its
//                      own direction; the scheme's weight on it read through KvCache::attend only
//   retrieval prompts  JSONL of {"prompt", "expected"} lines, a generator of copy prompts, and the
//                      end-to-end greedy exact-match evaluation per scheme

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "aqpim/kv_scheme.h"
#include "aqpim/transformer.h"

namespace aqpim {

// ---- the retrieval view of attention weights ----------------------------------------------------------

/// Query rows counted in one distance bin [dist_begin, dist_end).
struct RetrievalBin {
    std::int64_t dist_begin = 0, dist_end = 0;
    std::int64_t n_queries = 0;  ///< rows whose reference argmax is an earlier token with weight >= min_weight
    std::int64_t n_argmax = 0;   ///< of those, the scheme's argmax is the same token
    std::int64_t n_kept = 0;     ///< same argmax and |w - a| <= tolerance * a on that token
    double kept_fraction() const { return n_queries ? double(n_kept) / double(n_queries) : 0.0; }
    void merge(const RetrievalBin& o);
};

/// Distance bins [1, 2), [2, 4), [4, 8), ... up to max_distance (the last bin ends at max_distance + 1).
std::vector<RetrievalBin> retrieval_distance_bins(std::int64_t max_distance);

class RetrievalCounter {
public:
    /// Rows of queries at positions <= max_distance (the context) are binned by distance back.
    explicit RetrievalCounter(std::int64_t max_distance, double min_weight = 0.5, double tolerance = 0.1);

    /// One query row at position `pos`: ref and scheme weights over the tokens 0..pos (distributions).
    /// Counted when ref's argmax t (lowest index on ties) is an earlier token (t < pos) other than the
    /// attention sink at position 0, with ref[t] >= min_weight. Rows whose argmax is token 0 or the
    /// query's own token are counted in n_sink_rows / n_self_rows only.
    void add(const double* ref, const double* scheme, std::int64_t pos);
    void merge(const RetrievalCounter& o);

    const std::vector<RetrievalBin>& bins() const { return bins_; }
    RetrievalBin all() const;
    std::int64_t n_rows() const { return n_rows_; }            ///< rows seen
    std::int64_t n_sink_rows() const { return n_sink_rows_; }  ///< peaked (>= min_weight) on token 0
    std::int64_t n_self_rows() const { return n_self_rows_; }  ///< peaked on the query's own token
    double min_weight() const { return min_weight_; }
    double tolerance() const { return tolerance_; }

private:
    double min_weight_, tolerance_;
    std::vector<RetrievalBin> bins_;
    std::int64_t n_rows_ = 0, n_sink_rows_ = 0, n_self_rows_ = 0;
};

/// One row per scheme, one column per distance bin: "kept% (queries)"; an absent counter prints n/a.
std::string retrieval_view_table(const std::vector<std::string>& names,
                                 const std::vector<const RetrievalCounter*>& counters);

// ---- planted needles on synthetic K/V --------------------------------------------------------------------

struct NeedleOptions {
    std::vector<std::int64_t> contexts = {1024, 4096, 16384, 65536, 131072};
    std::vector<double> depths = {0.1, 0.5, 0.9};        ///< needle position / context
    std::vector<double> target_weights = {0.6, 0.8, 0.95};  ///< exact weight each query puts on the needle
    int head_dim = 128;
    std::uint64_t seed = 1;
    /// Decoy tokens at positions t = 1 (mod decoy_every) carry the needle's value pattern, so that a
    /// scheme learning its value storage from any window of tokens stores that pattern (docs/eval.md).
    int decoy_every = 32;
};

/// One needle query: the reference (exact attention over the f32 rows) and the scheme's weight.
struct NeedleResult {
    std::int64_t context = 0, needle_pos = 0;
    double depth = 0, target = 0;
    double exact_weight = 0;   ///< on the needle, f32 exact attention (the query was scaled for `target`)
    double scheme_weight = 0;  ///< read from the scheme's outputs
    bool kept = false;         ///< |scheme - exact| <= 0.1 exact and scheme weight > 1/2 (so it is the argmax)
};

struct SchemeNeedles {
    std::string spec, scheme;
    std::vector<NeedleResult> results;
    double bits_per_element = 0;  ///< of the largest context's cache
    std::string note;             ///< why the weights could not be read, when not
};

/// Key rows [n][head_dim] with the statistics of real post-RoPE keys (a few outlier channels,
/// low-rank structure, RoPE by position; synthetic_attention's generator) and value rows.
/// For each scheme, context and depth: two caches of one layer and one KV head are filled with the same
/// keys and values except the needle's value (pattern B vs pattern A), queried at the last position
/// with q = beta * k_needle for beta giving each target weight; the difference of the two outputs is
/// the needle's weight times (B - A).
std::vector<SchemeNeedles> plant_needles(const std::vector<KvSchemeSpec>& schemes, const NeedleOptions& options,
                                         const std::function<void(const std::string&)>& progress = {});

std::string needles_table(const std::vector<SchemeNeedles>& r);
std::string needles_json(const std::vector<SchemeNeedles>& r);

// ---- end-to-end retrieval prompts ------------------------------------------------------------------

struct RetrievalPrompt {
    std::string prompt, expected;
    double depth = -1;        ///< where the fact sits in the prompt, 0..1 (-1: not given)
    std::int64_t ctx = -1;    ///< nominal context in tokens (-1: not given; the prompt's token count is used)
};

/// One {"prompt": str, "expected": str, "depth"?: number in [0, 1], "ctx"?: int >= 1} object per
/// non-empty line. Any other line is an aqpim::Error naming `source` and the line number.
std::vector<RetrievalPrompt> parse_retrieval_jsonl(const std::string& text, const std::string& source);
std::string retrieval_prompt_json(const RetrievalPrompt& p);  ///< one line, no newline

struct RetrievalGenOptions {
    std::vector<std::int64_t> contexts = {256, 512, 1024};
    std::vector<double> depths = {0.1, 0.5, 0.9};
    int per_cell = 4;        ///< prompts per (context, depth)
    int span_words = 8;      ///< words of the fact; the prompt repeats the first half, expected is the rest
    std::uint64_t seed = 1;
};

/// Copy prompts: filler text (consecutive words of `filler` from a seeded offset) about ctx tokens
/// long, the fact "The secret words are: w1 ... wS." inserted at depth, and at the end "The secret
/// words are: w1 ... w(S/2)"; expected " w(S/2+1) ... wS". count_tokens measures text in the model's
/// tokens. Deterministic for the options and inputs.
std::vector<RetrievalPrompt> generate_retrieval_prompts(const std::string& filler,
                                                        const std::function<std::int64_t(const std::string&)>& count_tokens,
                                                        const RetrievalGenOptions& options);

struct RetrievalCell {
    std::int64_t key = 0;  ///< context (by-context cells) or depth in percent (by-depth cells)
    int n = 0, n_correct = 0;
    double accuracy() const { return n ? double(n_correct) / n : 0.0; }
};

struct SchemeRetrieval {
    std::string spec, scheme;
    bool reference = false;
    int n = 0, n_correct = 0;
    std::vector<RetrievalCell> by_context, by_depth;
    std::vector<std::string> outputs;  ///< the greedy continuation of each prompt, decoded
};

struct RetrievalReport {
    int n_prompts = 0;
    std::vector<SchemeRetrieval> schemes;  ///< reference first
};

/// Tokens of text (encode) and text of tokens (decode): the model's tokenizer.
struct RetrievalTokenizer {
    std::function<std::vector<std::int32_t>(const std::string&, bool bos)> encode;
    std::function<std::string(const std::vector<std::int32_t>&)> decode;
};

/// Per prompt and scheme: a fresh cache, the prompt (BOS first) prefilled, then greedy decoding of as
/// many tokens as `expected` encodes to (+2); correct when the decoded continuation starts with
/// `expected` (leading spaces of both ignored). Cells by the prompt's ctx (its token count when not
/// given) and by depth (percent; prompts without a depth are left out of that view).
RetrievalReport evaluate_retrieval(Transformer& model, const RetrievalTokenizer& tok,
                                   const std::vector<RetrievalPrompt>& prompts,
                                   const std::vector<KvSchemeSpec>& schemes);

std::string retrieval_table(const RetrievalReport& r);
std::string retrieval_json(const RetrievalReport& r, const std::vector<std::pair<std::string, std::string>>& meta);

}  // namespace aqpim
