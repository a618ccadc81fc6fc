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

/// `tokens` is the tokenized text with BOS first; `bos` the id chunks start with.
PerplexityResult perplexity(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                            const KvCacheFactory& make_cache, const PerplexityOptions& options);

/// -log softmax(logits)[target] for logits [n_vocab], in double.
double token_nll(const float* logits, int n_vocab, std::int32_t target);

}  // namespace aqpim
