// Prefill + decode loop.

#include "aqpim/generate.h"

#include "aqpim/error.h"
#include "aqpim/kv_state.h"
#include "aqpim/timer.h"

namespace aqpim {

namespace {

/// Feed tokens[first..] (at least one) to sequence seq_id, then sample and decode: every sampled
/// token is appended to `tokens` (a stopping EOS too, unfed). Returns how many tokens were fed in all.
std::size_t run(Transformer& model, const Tokenizer& tokenizer, KvCache& cache, int seq_id,
                std::vector<std::int32_t>& tokens, std::size_t first, Sampler& sampler, const GenerateOptions& options,
                GenerateResult& res) {
    AQPIM_CHECK(first < tokens.size(), "generate: no token to feed (the prompt is empty or every token is cached)");
    AQPIM_CHECK(options.n_predict >= 0, "generate: cannot generate {} tokens", options.n_predict);
    const int n_vocab = model.config().n_vocab;
    res.n_prompt = int(tokens.size() - first);

    std::vector<float> logits;
    Timer timer;
    BatchSequence seq{seq_id, std::span<const std::int32_t>(tokens).subspan(first), false};
    model.forward({&seq, 1}, cache, logits);
    std::size_t fed = tokens.size();
    res.prefill_seconds = timer.seconds();

    std::int32_t prev = tokens.back();
    timer.reset();
    for (int i = 0; i < options.n_predict; ++i) {
        const std::int32_t next = sampler.sample(logits.data(), n_vocab);
        tokens.push_back(next);
        if (options.stop_at_eos && next == tokenizer.eos()) break;
        res.generated.push_back(next);
        const std::string piece = tokenizer.piece(prev, next);
        res.text += piece;
        if (options.on_piece) options.on_piece(piece);
        prev = next;
        if (i + 1 == options.n_predict) break;  // the last token needs no forward pass
        seq.tokens = {&tokens.back(), 1};
        const ForwardTraffic t = model.forward({&seq, 1}, cache, logits);
        fed = tokens.size();
        res.decode_bytes += t.weight_bytes + t.kv_bytes;
        ++res.n_decode_steps;
    }
    res.decode_seconds = timer.seconds();
    return fed;
}

}  // namespace

GenerateResult generate(Transformer& model, const Tokenizer& tokenizer, KvCache& cache,
                        const std::vector<std::int32_t>& prompt, const GenerateOptions& options) {
    AQPIM_CHECK(!prompt.empty(), "generate: the prompt has no tokens (add BOS)");
    Sampler sampler(options.sampler);
    if (!cache.has_sequence(0)) cache.add_sequence(0);
    std::vector<std::int32_t> tokens = prompt;
    GenerateResult res;
    run(model, tokenizer, cache, 0, tokens, 0, sampler, options, res);
    return res;
}

GenerateResult generate(Transformer& model, const Tokenizer& tokenizer, KvCache& cache, int seq_id, SlotState& slot,
                        Sampler& sampler, const GenerateOptions& options) {
    AQPIM_CHECK(cache.has_sequence(seq_id), "generate: the cache has no sequence {}", seq_id);
    AQPIM_CHECK(slot.n_cached >= 0 && slot.n_cached <= std::int64_t(slot.tokens.size()),
                "generate: the slot has {} tokens and says {} are cached", slot.tokens.size(), slot.n_cached);
    AQPIM_CHECK(cache.n_tokens(seq_id, 0) == slot.n_cached, "generate: sequence {} holds {} tokens, the slot says {}",
                seq_id, cache.n_tokens(seq_id, 0), slot.n_cached);
    GenerateResult res;
    slot.n_cached = std::int64_t(run(model, tokenizer, cache, seq_id, slot.tokens, std::size_t(slot.n_cached), sampler,
                                     options, res));
    return res;
}

}  // namespace aqpim
