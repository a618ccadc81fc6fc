// End-to-end retrieval: greedy decoding of each prompt with each scheme's cache, exact match of the
// expected continuation, by context and by depth (aqpim/retrieval.h).

#include <algorithm>
#include <cmath>
#include <map>

#include "aqpim/error.h"
#include "aqpim/eval.h"
#include "aqpim/retrieval.h"
#include "aqpim/sampler.h"
#include "core/text_space.h"

namespace aqpim {
namespace {

void add_cell(std::vector<RetrievalCell>& cells, std::int64_t key, bool correct) {
    auto it = std::find_if(cells.begin(), cells.end(), [&](const RetrievalCell& c) { return c.key == key; });
    if (it == cells.end()) {
        cells.push_back(RetrievalCell{key, 0, 0});
        it = cells.end() - 1;
    }
    ++it->n;
    it->n_correct += correct;
}

}  // namespace

RetrievalReport evaluate_retrieval(Transformer& model, const RetrievalTokenizer& tok,
                                   const std::vector<RetrievalPrompt>& prompts,
                                   const std::vector<KvSchemeSpec>& schemes_in) {
    AQPIM_CHECK(!prompts.empty(), "eval --retrieval: no prompts");
    int ref = 0;
    const std::vector<KvSchemeSpec> schemes = with_f16_reference(schemes_in, &ref);
    const KvShape shape = model.kv_shape();
    const int n_vocab = model.config().n_vocab;

    struct Encoded {
        std::vector<std::int32_t> prompt;
        int n_generate = 0;
    };
    std::vector<Encoded> enc;
    std::int64_t longest = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        Encoded e;
        e.prompt = tok.encode(prompts[i].prompt, true);
        AQPIM_CHECK(!e.prompt.empty(), "eval --retrieval: prompt {} has no tokens", i + 1);
        e.n_generate = int(tok.encode(prompts[i].expected, false).size()) + 2;
        longest = std::max<std::int64_t>(longest, std::int64_t(e.prompt.size()) + e.n_generate);
        enc.push_back(std::move(e));
    }
    check_kv_schemes(schemes, shape, KvCacheOptions{0, longest});

    RetrievalReport report;
    report.n_prompts = int(prompts.size());
    std::vector<float> logits;
    for (std::size_t s = 0; s < schemes.size(); ++s) {
        SchemeRetrieval r;
        r.spec = schemes[s].text;
        r.reference = int(s) == ref;
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            const Encoded& e = enc[i];
            const std::int64_t context = std::int64_t(e.prompt.size()) + e.n_generate;
            std::unique_ptr<KvCache> cache = make_kv_cache(schemes[s], shape, KvCacheOptions{0, context});
            cache->add_sequence(0);
            r.scheme = cache->scheme();
            const BatchSequence seq{0, e.prompt, false};
            model.forward({&seq, 1}, *cache, logits);
            std::vector<std::int32_t> generated;
            for (int t = 0; t < e.n_generate; ++t) {
                const std::int32_t token = argmax(logits.data(), n_vocab);
                generated.push_back(token);
                if (t + 1 == e.n_generate) break;
                const BatchSequence step{0, {&token, 1}, false};
                model.forward({&step, 1}, *cache, logits);
            }
            const std::string text = tok.decode(generated);
            const std::string_view want = trim_leading_space(prompts[i].expected);
            const bool correct = trim_leading_space(text).substr(0, want.size()) == want;
            ++r.n;
            r.n_correct += correct;
            r.outputs.push_back(text);
            add_cell(r.by_context, prompts[i].ctx >= 1 ? prompts[i].ctx : std::int64_t(e.prompt.size()), correct);
            if (prompts[i].depth >= 0) add_cell(r.by_depth, std::llround(prompts[i].depth * 100), correct);
        }
        const auto by_key = [](const RetrievalCell& a, const RetrievalCell& b) { return a.key < b.key; };
        std::sort(r.by_context.begin(), r.by_context.end(), by_key);
        std::sort(r.by_depth.begin(), r.by_depth.end(), by_key);
        report.schemes.push_back(std::move(r));
    }
    // Reference first.
    if (ref != 0) std::rotate(report.schemes.begin(), report.schemes.begin() + ref, report.schemes.begin() + ref + 1);
    return report;
}

}  // namespace aqpim
