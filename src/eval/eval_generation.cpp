// Long generation check: greedy decoding with every scheme in lock step, teacher-forced on the f16
// reference's tokens (see aqpim/eval.h).

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/eval.h"
#include "aqpim/timer.h"
#include "core/int_math.h"

namespace aqpim {

GenerationReport check_generation(Transformer& model, const std::vector<std::int32_t>& prompt,
                                  const std::vector<KvSchemeSpec>& schemes_in, const GenerationCheckOptions& options) {
    AQPIM_CHECK(!prompt.empty(), "eval --generate: the prompt has no tokens (BOS at least is needed)");
    AQPIM_CHECK(options.n_generate >= 1, "eval --generate: {} steps (need >= 1)", options.n_generate);
    AQPIM_CHECK(options.window >= 1, "eval --generate: KL window of {} steps (need >= 1)", options.window);
    int ref = 0;
    const std::vector<KvSchemeSpec> schemes = with_f16_reference(schemes_in, &ref);
    const std::size_t n_schemes = schemes.size();
    const int n_vocab = model.config().n_vocab, n_steps = options.n_generate;
    const std::int64_t context = std::int64_t(prompt.size()) + n_steps - 1;  // the last token is never fed
    const KvShape shape = model.kv_shape();
    check_kv_schemes(schemes, shape, KvCacheOptions{0, context});

    GenerationReport report;
    report.n_prompt = int(prompt.size());
    report.n_generate = n_steps;
    report.window = options.window;
    report.schemes.resize(n_schemes);
    std::vector<std::unique_ptr<KvCache>> caches(n_schemes);
    std::vector<std::vector<float>> logits(n_schemes);
    for (std::size_t s = 0; s < n_schemes; ++s) {
        SchemeGeneration& g = report.schemes[s];
        g.spec = schemes[s].text;
        g.reference = int(s) == ref;
        caches[s] = make_kv_cache(schemes[s], shape, KvCacheOptions{0, context});
        caches[s]->add_sequence(0);
        g.scheme = caches[s]->scheme();
        Timer timer;
        const BatchSequence seq{0, prompt, false};
        model.forward({&seq, 1}, *caches[s], logits[s]);
        g.prefill_seconds = timer.seconds();
    }

    const int n_windows = ceil_div(n_steps, options.window);
    std::vector<std::vector<double>> window_kl(n_schemes, std::vector<double>(std::size_t(n_windows), 0.0));
    std::vector<std::vector<int>> window_top1(n_schemes, std::vector<int>(std::size_t(n_windows), 0));
    for (int t = 0; t < n_steps; ++t) {
        // Step t: every cache holds the prompt and the reference's tokens of steps < t.
        const float* ref_row = logits[std::size_t(ref)].data();
        const std::int32_t token = std::int32_t(argmax(ref_row, n_vocab));
        const double ref_lse = log_sum_exp(ref_row, n_vocab);
        for (std::size_t s = 0; s < n_schemes; ++s) {
            SchemeGeneration& g = report.schemes[s];
            const std::int32_t mine = std::int32_t(argmax(logits[s].data(), n_vocab));
            const double kl = kl_divergence(ref_row, ref_lse, logits[s].data(), n_vocab);
            g.tokens.push_back(mine);
            if (mine != token && g.first_divergence < 0) g.first_divergence = t;
            g.mean_kl += kl;
            g.max_kl = std::max(g.max_kl, kl);
            g.top1 += mine == token;
            window_kl[s][std::size_t(t / options.window)] += kl;
            window_top1[s][std::size_t(t / options.window)] += mine == token;
        }
        if (t + 1 == n_steps) break;
        for (std::size_t s = 0; s < n_schemes; ++s) {
            Timer timer;
            const BatchSequence seq{0, {&token, 1}, false};
            model.forward({&seq, 1}, *caches[s], logits[s]);
            report.schemes[s].decode_seconds += timer.seconds();
        }
    }

    for (std::size_t s = 0; s < n_schemes; ++s) {
        SchemeGeneration& g = report.schemes[s];
        g.mean_kl /= n_steps;
        g.top1 /= n_steps;
        for (int w = 0; w < n_windows; ++w) {
            const int n = std::min(options.window, n_steps - w * options.window);
            g.window_kl.push_back(window_kl[s][std::size_t(w)] / n);
            g.window_top1.push_back(double(window_top1[s][std::size_t(w)]) / n);
        }
        const KvMemory mem = caches[s]->memory();
        g.kv_bytes = mem.bytes;
        g.bits_per_element = mem.bits_per_element(shape);
    }
    return report;
}

}  // namespace aqpim
