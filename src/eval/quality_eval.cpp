// The quality harness: llama.cpp's perplexity chunks through several KV cache schemes, each compared
// with the f16 reference's logits of the same chunk (see aqpim/eval.h and docs/eval.md).

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/eval.h"
#include "aqpim/perplexity.h"
#include "aqpim/timer.h"

namespace aqpim {

// ---- helpers -------------------------------------------------------------------------------------------

std::vector<KvSchemeSpec> with_f16_reference(std::vector<KvSchemeSpec> schemes, int* reference_index) {
    AQPIM_CHECK(!schemes.empty(), "eval: no KV cache scheme to evaluate");
    const auto is_ref = [](const KvSchemeSpec& s) { return s.name == "f16" && s.params.empty(); };
    auto it = std::find_if(schemes.begin(), schemes.end(), is_ref);
    if (it == schemes.end()) {
        schemes.insert(schemes.begin(), parse_kv_scheme("f16"));
        it = schemes.begin();
    }
    if (reference_index) *reference_index = int(it - schemes.begin());
    return schemes;
}

void check_kv_schemes(const std::vector<KvSchemeSpec>& schemes, const KvShape& shape, const KvCacheOptions& options) {
    for (const KvSchemeSpec& spec : schemes) make_kv_cache(spec, shape, options);
}

double log_sum_exp(const float* logits, int n_vocab) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
    return double(mx) + std::log(sum);
}

double kl_divergence(const float* ref, double ref_lse, const float* other, int n_vocab) {
    if (std::isnan(ref_lse)) ref_lse = log_sum_exp(ref, n_vocab);
    const double other_lse = log_sum_exp(other, n_vocab);
    double kl = 0.0;
    for (int i = 0; i < n_vocab; ++i) {
        const double lp = double(ref[i]) - ref_lse, lq = double(other[i]) - other_lse;
        kl += std::exp(lp) * (lp - lq);
    }
    return kl;
}

double run_chunk(Transformer& model, KvCache& cache, std::span<const std::int32_t> chunk, int n_prefill,
                 ScoredRows rows, std::vector<float>& logits) {
    const std::int64_t n = std::int64_t(chunk.size());
    AQPIM_CHECK(n_prefill >= 1 && n_prefill < n, "eval: prefill of {} tokens in a chunk of {} (need 1 <= prefill < chunk)",
                n_prefill, n);
    const int n_vocab = model.config().n_vocab;
    cache.add_sequence(0);
    std::vector<float> step;
    Timer timer;
    const BatchSequence prefill{0, chunk.first(std::size_t(n_prefill)), false};
    model.forward({&prefill, 1}, cache, step);
    const std::span<const std::int32_t> rest = chunk.subspan(std::size_t(n_prefill));
    if (rows == ScoredRows::batched) {
        const BatchSequence seq{0, rest, true};
        model.forward({&seq, 1}, cache, logits);
    } else {
        logits.resize(rest.size() * std::size_t(n_vocab));
        for (std::size_t r = 0; r < rest.size(); ++r) {
            const BatchSequence seq{0, rest.subspan(r, 1), false};
            model.forward({&seq, 1}, cache, step);
            std::copy(step.begin(), step.end(), logits.begin() + std::ptrdiff_t(r * n_vocab));
        }
    }
    return timer.seconds();
}

// ---- evaluate_quality ---------------------------------------------------------------------------------

namespace {

/// Most bytes a sequence holds on its way to n tokens; the bytes at n for schemes that cannot tell.
std::uint64_t peak_sequence_bytes(const KvCache& cache, std::int64_t n) {
    std::uint64_t peak = 0;
    try {
        for (std::int64_t t = 1; t <= n; ++t) peak = std::max(peak, cache.sequence_bytes(t));
    } catch (const Error&) {
        return 0;
    }
    return peak;
}

/// Running sums of one scheme over the chunks.
struct SchemeSums {
    NllStats nll;
    double kl = 0, kl2 = 0, kl_max = 0;
    std::int64_t n_top1 = 0;
};

}  // namespace

QualityReport evaluate_quality(Transformer& model, const std::vector<std::int32_t>& tokens, std::int32_t bos,
                               const std::vector<KvSchemeSpec>& schemes_in, const QualityOptions& options) {
    int ref = 0;
    const std::vector<KvSchemeSpec> schemes = with_f16_reference(schemes_in, &ref);
    const PerplexityChunks chunks(tokens, bos, options.n_ctx, options.max_chunks);
    const int n_ctx = chunks.n_ctx(), first = chunks.first_scored(), n_vocab = model.config().n_vocab;
    const int n_rows = n_ctx - first;      // rows of the batched half: tokens first .. n_ctx-1
    const int n_score = n_ctx - 1 - first;  // rows scored: the last row has no target
    const std::size_t n_schemes = schemes.size();
    const KvShape shape = model.kv_shape();
    const KvCacheOptions cache_options{options.memory_budget, n_ctx};
    check_kv_schemes(schemes, shape, cache_options);

    QualityReport report;
    report.n_ctx = n_ctx;
    report.n_chunks = chunks.n_chunks();
    report.n_text_tokens = std::int64_t(tokens.size());
    report.shape = shape;
    report.schemes.resize(n_schemes);
    for (std::size_t s = 0; s < n_schemes; ++s) {
        report.schemes[s].spec = schemes[s].text;
        report.schemes[s].reference = int(s) == ref;
    }
    std::vector<SchemeSums> sums(n_schemes);

    // The reference's logits of the chunk's scored rows and their log-sum-exp: all a scheme needs.
    std::vector<float> ref_logits, logits;
    std::vector<double> ref_lse(static_cast<std::size_t>(n_score));
    std::vector<int> ref_top(static_cast<std::size_t>(n_score));
    for (int ic = 0; ic < chunks.n_chunks(); ++ic) {
        const std::vector<std::int32_t> chunk = chunks.chunk(ic);
        // Reference first, then the others in order.
        for (std::size_t k = 0; k < n_schemes; ++k) {
            const std::size_t s = k == 0 ? std::size_t(ref) : (int(k) <= ref ? k - 1 : k);
            SchemeQuality& q = report.schemes[s];
            std::unique_ptr<KvCache> cache = make_kv_cache(schemes[s], shape, cache_options);
            q.seconds += run_chunk(model, *cache, chunk, first, ScoredRows::batched, logits);
            AQPIM_ASSERT(logits.size() == std::size_t(n_rows) * n_vocab);
            const KvMemory mem = cache->memory();
            q.scheme = cache->scheme();
            if (ic == 0 || mem.bytes > q.kv_bytes) {
                q.kv_bytes = mem.bytes;
                q.kv_parts = mem.parts;
                q.bits_per_element = mem.bits_per_element(shape);
            }
            if (ic == 0) {
                q.peak_kv_bytes = peak_sequence_bytes(*cache, n_ctx);
                q.peak_bits_per_element = double(q.peak_kv_bytes) * 8 / (double(n_ctx) * double(shape.elements_per_token()));
            }
            q.peak_kv_bytes = std::max(q.peak_kv_bytes, mem.bytes);
            q.peak_bits_per_element = std::max(q.peak_bits_per_element, q.bits_per_element);
            if (s == std::size_t(ref)) {
                ref_logits.swap(logits);
                for (int r = 0; r < n_score; ++r) {
                    const float* row = ref_logits.data() + std::size_t(r) * n_vocab;
                    ref_lse[r] = log_sum_exp(row, n_vocab);
                    ref_top[r] = argmax(row, n_vocab);
                }
            }
            const std::vector<float>& mine = s == std::size_t(ref) ? ref_logits : logits;
            SchemeSums& sum = sums[s];
            for (int r = 0; r < n_score; ++r) {
                const float* row = mine.data() + std::size_t(r) * n_vocab;
                sum.nll.add(token_nll(row, n_vocab, chunk[std::size_t(first + r) + 1]));
                const double kl = kl_divergence(ref_logits.data() + std::size_t(r) * n_vocab, ref_lse[r], row, n_vocab);
                sum.kl += kl;
                sum.kl2 += kl * kl;
                sum.kl_max = std::max(sum.kl_max, kl);
                sum.n_top1 += argmax(row, n_vocab) == ref_top[r];
            }
        }
        if (options.progress) options.progress(ic + 1, chunks.n_chunks());
    }

    report.n_scored = sums[0].nll.count;
    const double ref_ppl = sums[std::size_t(ref)].nll.ppl();
    for (std::size_t s = 0; s < n_schemes; ++s) {
        SchemeQuality& q = report.schemes[s];
        const SchemeSums& sum = sums[s];
        const double n = double(sum.nll.count);
        q.ppl = sum.nll.ppl();
        q.ppl_error = sum.nll.ppl_error();
        q.mean_nll = sum.nll.mean();
        q.delta_ppl_pct = 100.0 * (q.ppl / ref_ppl - 1.0);
        q.mean_kl = sum.kl / n;
        const double kl_var = sum.kl2 / n - q.mean_kl * q.mean_kl;
        q.kl_error = n > 1 && kl_var > 0 ? std::sqrt(kl_var / (n - 1)) : 0.0;
        q.max_kl = sum.kl_max;
        q.top1 = double(sum.n_top1) / n;
        q.top1_error = n > 1 ? std::sqrt(q.top1 * (1.0 - q.top1) / (n - 1)) : 0.0;
        q.tokens_per_s = q.seconds > 0 ? double(n_ctx) * report.n_chunks / q.seconds : 0.0;
    }
    return report;
}

}  // namespace aqpim
