// Prefill + decode loop.

#include "aqpim/generate.h"

#include "aqpim/error.h"
#include "aqpim/timer.h"

namespace aqpim {

GenerateResult generate(Transformer& model, const Tokenizer& tokenizer, KvCache& cache,
                        const std::vector<std::int32_t>& prompt, const GenerateOptions& options) {
    AQPIM_CHECK(!prompt.empty(), "generate: the prompt has no tokens (add BOS)");
    AQPIM_CHECK(options.n_predict >= 0, "generate: cannot generate {} tokens", options.n_predict);
    Sampler sampler(options.sampler);
    const int n_vocab = model.config().n_vocab;
    GenerateResult res;
    res.n_prompt = int(prompt.size());
    if (!cache.has_sequence(0)) cache.add_sequence(0);

    std::vector<float> logits;
    Timer timer;
    BatchSequence seq{0, prompt, false};
    model.forward({&seq, 1}, cache, logits);
    res.prefill_seconds = timer.seconds();

    std::int32_t prev = prompt.back();
    timer.reset();
    for (int i = 0; i < options.n_predict; ++i) {
        const std::int32_t next = sampler.sample(logits.data(), n_vocab);
        if (options.stop_at_eos && next == tokenizer.eos()) break;
        res.generated.push_back(next);
        const std::string piece = tokenizer.piece(prev, next);
        res.text += piece;
        if (options.on_piece) options.on_piece(piece);
        prev = next;
        if (i + 1 == options.n_predict) break;  // the last token needs no forward pass
        seq.tokens = {&res.generated.back(), 1};
        const ForwardTraffic t = model.forward({&seq, 1}, cache, logits);
        res.decode_bytes += t.weight_bytes + t.kv_bytes;
        ++res.n_decode_steps;
    }
    res.decode_seconds = timer.seconds();
    return res;
}

}  // namespace aqpim
