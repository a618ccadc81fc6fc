// JSON mode's per-step cost (Google Benchmark), one thread: mask_json over a vocabulary of 4096
// (austen-13m's size), 32000 (Llama 2) and 128256 (Llama 3) token texts shaped like SentencePiece's
// (words with and without a leading space, punctuation, digits, single bytes), in three states:
// the start (only whitespace and '{' continue), inside a string (nearly every token continues and
// is read whole) and after a key's ':' (a value starts). Beside it, in the same process, the
// sampler's draw over the same vocabulary (BM_SampleSameVocab), which every step pays anyway, and
// the mask without its trie (BM_MaskEachToken: every token's text tried whole, as it was first built).
// BM_MaskJsonSchema: the same with a JSON schema's recognizer (json_schema.h), in those three states
// and two more (3: a key matched against the listed names; 4: inside a string with a maxLength).
//   BM_MaskJson/<vocab>/<state>   items/s = tokens tried per second; time = one step of one sequence

#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "aqpim/sampler.h"
#include "serve/json_constraint.h"
#include "serve/json_schema.h"

namespace {

using namespace aqpim;

serve::JsonVocabulary vocabulary(int n_vocab) {
    std::mt19937 gen(11);
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    const std::string punct = "{}[]\":,.;!?-'()0123456789";
    std::vector<std::string> texts;
    for (int t = 0; t < n_vocab; ++t) {
        std::string text;
        if (t < 3) {
            text = "";  // control tokens
        } else if (t < 259) {
            text = std::string(1, char(t - 3));  // byte tokens
        } else if (gen() % 8 == 0) {
            text = std::string(1, punct[gen() % punct.size()]);
            if (gen() % 2) text += punct[gen() % punct.size()];
        } else {
            if (gen() % 2) text = " ";
            for (int i = 0, n = 2 + int(gen() % 7); i < n; ++i) text += letters[gen() % letters.size()];
        }
        texts.push_back(text);
    }
    return serve::JsonVocabulary(std::move(texts), 2);
}

/// The mask without the trie: every token's whole text tried on a copy of the state.
void mask_each_token(const serve::JsonPrefix& state, const serve::JsonVocabulary& v, float* logits, int n_vocab) {
    bool any = false;
    for (int t = 0; t < n_vocab; ++t) {
        serve::JsonPrefix next = state;
        const bool ok = t != v.eos() && !v.text(t).empty() && !state.complete() && next.feed(v.text(t));
        any = any || ok;
        if (!ok && t != v.eos()) logits[t] = -1e30f;
    }
    if (any && !state.complete()) logits[v.eos()] = -1e30f;
}

serve::JsonPrefix state(int which) {
    serve::JsonPrefix p;
    if (which == 1) p.feed("{\"name\": \"Catherine Morland, who");
    if (which == 2) p.feed("{\"name\": \"Catherine\", \"age\":");
    return p;
}

/// One mask per iteration over range(0) tokens, in the state `prefix` gives for range(1).
template <class Prefix>
void time_mask(benchmark::State& st, Prefix (*prefix)(int)) {
    const int n_vocab = int(st.range(0));
    const serve::JsonVocabulary v = vocabulary(n_vocab);
    const Prefix p = prefix(int(st.range(1)));
    std::vector<float> logits(std::size_t(n_vocab), 0.0f);
    for (auto _ : st) {
        serve::mask_json(p, v, logits.data(), n_vocab, -1e30f);
        benchmark::DoNotOptimize(logits.data());
    }
    st.SetItemsProcessed(st.iterations() * n_vocab);
}

void BM_MaskJson(benchmark::State& st) { time_mask(st, state); }

/// A schema's recognizer in the same three states and two more: a key being matched against the
/// listed names, and inside a string with a maxLength (the plain-token shortcut counting characters).
const serve::JsonSchema& character_schema() {
    static const serve::JsonSchema s(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "nickname": {"type": "string", "maxLength": 40},
        "mood": {"enum": ["happy", "sad", "indifferent"]}}, "required": ["name", "age"]})"));
    return s;
}

serve::JsonSchemaPrefix schema_state(int which) {
    serve::JsonSchemaPrefix p(character_schema());
    const char* texts[] = {"", "{\"name\": \"Catherine Morland, who", "{\"name\": \"Catherine\", \"age\":",
                           "{\"name\": \"Catherine\", \"age\": 17, \"", "{\"name\": \"C\", \"age\": 17, \"nickname\": \"Cat"};
    p.feed(texts[which]);
    return p;
}

void BM_MaskJsonSchema(benchmark::State& st) { time_mask(st, schema_state); }

void BM_SampleSameVocab(benchmark::State& st) {
    const int n_vocab = int(st.range(0));
    std::mt19937 gen(3);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> l(static_cast<std::size_t>(n_vocab));
    for (float& x : l) x = normal(gen);
    Sampler s(SamplerParams{0.8f, 0.95f, 7});
    for (auto _ : st) benchmark::DoNotOptimize(s.sample(l.data(), n_vocab));
    st.SetItemsProcessed(st.iterations() * n_vocab);
}

void BM_MaskEachToken(benchmark::State& st) {
    const int n_vocab = int(st.range(0));
    const serve::JsonVocabulary v = vocabulary(n_vocab);
    const serve::JsonPrefix p = state(int(st.range(1)));
    std::vector<float> logits(std::size_t(n_vocab), 0.0f);
    for (auto _ : st) {
        mask_each_token(p, v, logits.data(), n_vocab);
        benchmark::DoNotOptimize(logits.data());
    }
    st.SetItemsProcessed(st.iterations() * n_vocab);
}

BENCHMARK(BM_MaskJson)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskJsonSchema)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2, 3, 4}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskEachToken)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleSameVocab)->Arg(4096)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
