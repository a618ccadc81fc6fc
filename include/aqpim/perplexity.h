#pragma once
// Perplexity with exactly llama.cpp's `llama-perplexity` protocol, so figures compare: the whole
// text is tokenized with BOS, cut into chunks of n_ctx tokens, each chunk's first token replaced by
// BOS, each chunk evaluated from an empty cache, and the negative log-likelihood averaged over the
// tokens of the second half of every chunk (predicting token j+1 from logits j, for
// j in [n_ctx/2, n_ctx-1)). The ± figure is llama.cpp's: ppl * stddev(nll) / sqrt(count-1).

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/transformer.h"

namespace aqpim {

struct PerplexityOptions {
    int n_ctx = 512;
    int max_chunks = 0;  ///< 0: every full chunk of the text
    /// Called after each chunk with (chunks done, chunks total).
    std::function<void(int, int)> progress;
};

struct PerplexityResult {
    double ppl = 0.0;
    double ppl_error = 0.0;
    double mean_nll = 0.0;
    std::int64_t n_scored = 0;  ///< tokens whose NLL was averaged
    int n_chunks = 0;
    int n_ctx = 0;
    std::int64_t n_text_tokens = 0;
    std::vector<double> chunk_ppl;  ///< running ppl after each chunk (llama.cpp prints these)
    double seconds = 0.0;
};

using KvCacheFactory = std::function<std::unique_ptr<KvCache>(const KvShape&)>;

// ---- pieces of the protocol (shared with the quality harness, aqpim/eval.h) ------------------------

/// The chunks of a tokenized text: chunk ic is tokens [ic * n_ctx, (ic + 1) * n_ctx) with its first
/// token replaced by BOS; rows j in [first_scored(), n_ctx - 1) are scored against token j + 1.
class PerplexityChunks {
public:
    /// Throws aqpim::Error when n_ctx < 4 or the text holds less than one chunk.
    PerplexityChunks(const std::vector<std::int32_t>& tokens, std::int32_t bos, int n_ctx, int max_chunks);
    int n_chunks() const { return n_chunks_; }
    int n_ctx() const { return n_ctx_; }
    /// First scored row: n_ctx / 2 (the unscored first half is context only).
    int first_scored() const { return n_ctx_ / 2; }
    /// Tokens of chunk ic, BOS first: [n_ctx].
    std::vector<std::int32_t> chunk(int ic) const;

private:
    const std::vector<std::int32_t>& tokens_;
    std::int32_t bos_;
    int n_ctx_, n_chunks_;
};

/// Running negative log-likelihood statistics with llama.cpp's perplexity and ± figure.
struct NllStats {
    double sum = 0.0, sum2 = 0.0;
    std::int64_t count = 0;
    void add(double nll) { sum += nll, sum2 += nll * nll, ++count; }
    double mean() const { return count ? sum / double(count) : 0.0; }
    double ppl() const;
    /// ppl * stddev(nll) / sqrt(count - 1) (0 with fewer than two values).
    double ppl_error() const;
};

/// `tokens` is the tokenized text with BOS first; `bos` the id chunks start with.
PerplexityResult perplexity(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                            const KvCacheFactory& make_cache, const PerplexityOptions& options);

/// -log softmax(logits)[target] for logits [n_vocab], in double.
double token_nll(const float* logits, int n_vocab, std::int32_t target);

}  // namespace aqpim
