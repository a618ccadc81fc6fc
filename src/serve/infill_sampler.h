#pragma once
// llama-server's infill sampler (docs/serve.md "llama-server's own endpoints"), the step code
// completion plugins (llama.vim, llama.vscode) put last: over the tokens still in the running, at
// temperature 1, it ends the middle when the end tokens hold enough of the probability, merges
// each token into another whose text starts with its own (the likelier keeps both
// probabilities), and keeps only tokens above two thresholds. The draw then weighs the tokens
// kept by their own logits, as llama.cpp's does.

#include <cstdint>
#include <memory>
#include <vector>

namespace aqpim::serve {

class GuideVocabulary;

struct InfillSampling {
    std::shared_ptr<const GuideVocabulary> vocabulary;  ///< each token's text
    /// The tokens that end a middle (llama.cpp's end-of-generation tokens: EOS and the FIM end
    /// tokens).
    std::vector<std::int32_t> ends;
};

/// At most this many of the most likely tokens are compared for merging (llama.cpp compares every
/// pair of the tokens in the running: after its default top_k of 40, the same).
inline constexpr std::size_t kInfillMergeCandidates = 512;

/// Drop (to `dropped`) the tokens the infill sampler leaves out of logits [n_vocab]; tokens already
/// at or below `dropped` are out of the running.
void apply_infill_sampler(const InfillSampling& s, float* logits, int n_vocab, float dropped);

}  // namespace aqpim::serve
