// llama.cpp's perplexity protocol (see the header).

#include "aqpim/perplexity.h"

#include <cmath>

#include "aqpim/error.h"
#include "aqpim/timer.h"

namespace aqpim {

double token_nll(const float* logits, int n_vocab, std::int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
    return std::log(sum) - (double(logits[target]) - mx);
}

PerplexityResult perplexity(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                            const KvCacheFactory& make_cache, const PerplexityOptions& options) {
    const int n_ctx = options.n_ctx;
    AQPIM_CHECK(n_ctx >= 4, "perplexity: context {} is too small (need >= 4)", n_ctx);
    const std::int64_t n_available = std::int64_t(tokens.size()) / n_ctx;
    AQPIM_CHECK(n_available >= 1, "perplexity: the text has {} tokens, fewer than one chunk of {} (use a smaller -c)",
                tokens.size(), n_ctx);
    const int n_chunks = int(options.max_chunks > 0 ? std::min<std::int64_t>(options.max_chunks, n_available) : n_available);
    const int n_vocab = model.config().n_vocab;
    const int first = n_ctx / 2;

    PerplexityResult res;
    res.n_ctx = n_ctx;
    res.n_chunks = n_chunks;
    res.n_text_tokens = std::int64_t(tokens.size());
    Timer timer;
    double nll = 0.0, nll2 = 0.0;
    std::vector<float> logits;
    for (int ic = 0; ic < n_chunks; ++ic) {
        std::vector<std::int32_t> chunk(tokens.begin() + std::int64_t(ic) * n_ctx,
                                        tokens.begin() + std::int64_t(ic + 1) * n_ctx);
        chunk[0] = bos;
        std::unique_ptr<KvCache> cache = make_cache(model.kv_shape());
        cache->add_sequence(0);
        const BatchSequence seq{0, chunk, true};
        model.forward({&seq, 1}, *cache, logits);
        for (int j = first; j < n_ctx - 1; ++j) {
            const double v = token_nll(logits.data() + std::size_t(j) * n_vocab, n_vocab,
                                       tokens[std::int64_t(ic) * n_ctx + j + 1]);
            nll += v;
            nll2 += v * v;
            ++res.n_scored;
        }
        res.chunk_ppl.push_back(std::exp(nll / double(res.n_scored)));
        if (options.progress) options.progress(ic + 1, n_chunks);
    }
    res.seconds = timer.seconds();
    const double count = double(res.n_scored);
    res.mean_nll = nll / count;
    res.ppl = std::exp(res.mean_nll);
    const double var = nll2 / count - res.mean_nll * res.mean_nll;
    res.ppl_error = var > 0.0 && count > 1 ? std::sqrt(var / (count - 1)) * res.ppl : 0.0;
    return res;
}

}  // namespace aqpim
