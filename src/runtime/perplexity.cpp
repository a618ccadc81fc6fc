// llama.cpp's perplexity protocol (see the header).

#include "aqpim/perplexity.h"

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/timer.h"

namespace aqpim {

double token_nll(const float* logits, int n_vocab, std::int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
    const double nll = std::log(sum) - (double(logits[target]) - mx);
    AQPIM_CHECK(std::isfinite(nll), "perplexity: the logits of a position are not finite (target {}: {}): the model's "
                "weights or the KV cache hold NaN or Inf", target, logits[target]);
    return nll;
}

PerplexityChunks::PerplexityChunks(const std::vector<std::int32_t>& tokens, std::int32_t bos, int n_ctx,
                                   int max_chunks)
    : tokens_(tokens), bos_(bos), n_ctx_(n_ctx) {
    AQPIM_CHECK(n_ctx >= 4, "perplexity: context {} is too small (need >= 4)", n_ctx);
    const std::int64_t n_available = std::int64_t(tokens.size()) / n_ctx;
    AQPIM_CHECK(n_available >= 1, "perplexity: the text has {} tokens, fewer than one chunk of {} (use a smaller -c)",
                tokens.size(), n_ctx);
    n_chunks_ = int(max_chunks > 0 ? std::min<std::int64_t>(max_chunks, n_available) : n_available);
}

std::vector<std::int32_t> PerplexityChunks::chunk(int ic) const {
    AQPIM_CHECK(ic >= 0 && ic < n_chunks_, "perplexity: chunk {} out of range [0, {})", ic, n_chunks_);
    std::vector<std::int32_t> c(tokens_.begin() + std::int64_t(ic) * n_ctx_, tokens_.begin() + std::int64_t(ic + 1) * n_ctx_);
    c[0] = bos_;
    return c;
}

double NllStats::ppl() const { return std::exp(mean()); }

double NllStats::ppl_error() const {
    if (count < 2) return 0.0;
    const double m = mean(), var = sum2 / double(count) - m * m;
    return var > 0.0 ? std::sqrt(var / double(count - 1)) * ppl() : 0.0;
}

PerplexityResult perplexity(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                            const KvCacheFactory& make_cache, const PerplexityOptions& options) {
    const PerplexityChunks chunks(tokens, bos, options.n_ctx, options.max_chunks);
    const int n_ctx = chunks.n_ctx(), n_chunks = chunks.n_chunks(), first = chunks.first_scored();
    const int n_vocab = model.config().n_vocab;

    PerplexityResult res;
    res.n_ctx = n_ctx;
    res.n_chunks = n_chunks;
    res.n_text_tokens = std::int64_t(tokens.size());
    Timer timer;
    NllStats nll;
    std::vector<float> logits;
    for (int ic = 0; ic < n_chunks; ++ic) {
        const std::vector<std::int32_t> chunk = chunks.chunk(ic);
        std::unique_ptr<KvCache> cache = make_cache(model.kv_shape());
        cache->add_sequence(0);
        const BatchSequence seq{0, chunk, true};
        model.forward({&seq, 1}, *cache, logits);
        for (int j = first; j < n_ctx - 1; ++j)
            nll.add(token_nll(logits.data() + std::size_t(j) * n_vocab, n_vocab, chunk[std::size_t(j) + 1]));
        res.chunk_ppl.push_back(nll.ppl());
        if (options.progress) options.progress(ic + 1, n_chunks);
    }
    res.seconds = timer.seconds();
    res.n_scored = nll.count;
    res.mean_nll = nll.mean();
    res.ppl = nll.ppl();
    res.ppl_error = nll.ppl_error();
    return res;
}

}  // namespace aqpim
