// JSON mode's per-step cost (Google Benchmark), one thread: mask_guided over a vocabulary of 4096
// (austen-13m's size), 32000 (Llama 2) and 128256 (Llama 3) token texts shaped like SentencePiece's
// (words with and without a leading space, punctuation, digits, single bytes), in three states:
// the start (only whitespace and '{' continue), inside a string (nearly every token continues and
// is read whole) and after a key's ':' (a value starts). Beside it, in the same process, the
// sampler's draw over the same vocabulary (BM_SampleSameVocab), which every step pays anyway, and
// the mask without its trie (BM_MaskEachToken: every token's text tried whole, as it was first built).
// BM_MaskJsonSchema: the same with a JSON schema's recognizer (json_schema.h), in those three states
// and three more (3: a key matched against the listed names; 4: inside a string with a maxLength;
// 5: inside a string with a `pattern`, its tokens read from the automaton's cache; 6: inside a
// string of `format: email`, whose 254-character bound has each cached token tried whole).
// BM_MaskReasoning: the schema's recognizer after a reasoning model's reasoning (output_guide.h),
// in the reasoning, at a tag's end, at a free start and after </think>.
// BM_MaskRegex: a whole-output regex (structured_outputs' regex and choice): 0 inside a sentence
// pattern's word, 1 at the start of four choices; both read their state's cached token set, whose
// first filling BM_MaskRegexFirstVisit times. BM_CompileRegex: the pattern into its automaton
// (0 a date, 1 an e-mail address, 2 the sentence, 3 64 words as choices), once per request.
// BM_CompileFormat: a schema of one string of each enforced `format` (json_formats.h, in its
// order: 0 date-time ... 9 uri), its automaton and, for email and hostname, its length table.
//   BM_MaskJson/<vocab>/<state>   items/s = tokens tried per second; time = one step of one sequence

#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "aqpim/sampler.h"
#include "serve/grammar.h"
#include "serve/json_constraint.h"
#include "serve/json_formats.h"
#include "serve/json_schema.h"
#include "serve/output_guide.h"
#include "serve/regex_dfa.h"

namespace {

using namespace aqpim;

/// `punct`: the bytes of the punctuation tokens (one or two of them).
std::vector<std::string> vocabulary_texts(int n_vocab, const std::string& punct) {
    std::mt19937 gen(11);
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
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
    return texts;
}

serve::GuideVocabulary vocabulary(int n_vocab) {
    return serve::GuideVocabulary(vocabulary_texts(n_vocab, "{}[]\":,.;!?-'()0123456789"), 2);
}

/// The mask without the trie: every token's whole text tried on a copy of the state.
void mask_each_token(const serve::JsonPrefix& state, const serve::GuideVocabulary& v, float* logits, int n_vocab) {
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
    const serve::GuideVocabulary v = vocabulary(n_vocab);
    const Prefix p = prefix(int(st.range(1)));
    std::vector<float> logits(std::size_t(n_vocab), 0.0f);
    for (auto _ : st) {
        serve::mask_guided(p, v, logits.data(), n_vocab, -1e30f);
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
        "mood": {"enum": ["happy", "sad", "indifferent"]}, "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.[a-z]{2,4}$"},
        "contact": {"type": "string", "format": "email"}},
        "required": ["name", "age"]})"));
    return s;
}

serve::JsonSchemaPrefix schema_state(int which) {
    serve::JsonSchemaPrefix p(character_schema());
    const char* texts[] = {"", "{\"name\": \"Catherine Morland, who", "{\"name\": \"Catherine\", \"age\":",
                           "{\"name\": \"Catherine\", \"age\": 17, \"", "{\"name\": \"C\", \"age\": 17, \"nickname\": \"Cat",
                           "{\"name\": \"C\", \"age\": 17, \"email\": \"cath", "{\"name\": \"C\", \"age\": 17, \"contact\": \"cath"};
    p.feed(texts[which]);
    return p;
}

void BM_MaskJsonSchema(benchmark::State& st) { time_mask(st, schema_state); }

/// An anyOf of 16 objects (a required call among 16 tools: {"name": N, "arguments": A}, json_schema_variants.cpp)
/// at its first key, in the name (a literal of 16 merged), and at a key of the arguments once the
/// name has told the tools apart.
const serve::JsonSchema& union_schema() {
    static const serve::JsonSchema s([] {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (int t = 0; t < 16; ++t)
            calls.push_back({{"type", "object"}, {"required", {"name", "arguments"}},
                             {"properties", {{"name", {{"const", "tool_" + std::to_string(t)}}},
                                             {"arguments", {{"type", "object"}, {"properties", {{"town", {{"type", "string"}}},
                                                                                              {"n" + std::to_string(t), {{"type", "integer"}}}}}}}}}});
        return nlohmann::ordered_json{{"type", "object"}, {"properties", {{"call", {{"anyOf", calls}}}}}};
    }());
    return s;
}

serve::JsonSchemaPrefix union_state(int which) {
    serve::JsonSchemaPrefix p(union_schema());
    const char* texts[] = {"{\"call\": {\"", "{\"call\": {\"name\": \"tool_", "{\"call\": {\"name\": \"tool_7\", \"arguments\": {\""};
    p.feed(texts[which]);
    return p;
}

void BM_MaskJsonUnion(benchmark::State& st) { time_mask(st, union_state); }

/// A reasoning model's answer held to the character schema after its reasoning (OutputGuide::
/// reason_first): 0 in the reasoning, 1 there with "</thi" held (the tokens that complete the tag
/// tried on a copy), 2 a free start (the schema's tokens and the ways to <think>, every candidate
/// on a copy), 3 just after </think> (the schema's start, as BM_MaskJsonSchema/<vocab>/0). The
/// vocabulary's punctuation holds '<', '>' and '/' too (about 0.7% of its tokens hold '>').
void BM_MaskReasoning(benchmark::State& st) {
    const int n_vocab = int(st.range(0));
    std::vector<std::string> texts = vocabulary_texts(n_vocab, "{}[]\":,.;!?-'()0123456789<>/");
    texts[259] = "<think>";
    texts[260] = "</think>";
    const serve::GuideVocabulary v(std::move(texts), 2);
    serve::OutputGuide g(&character_schema());
    const int which = int(st.range(1));
    g.reason_first(which == 2 ? serve::ReasoningStart::free : serve::ReasoningStart::open);
    if (which == 0) g.feed("Catherine asks for a name and an age, so");
    if (which == 1) g.feed("Catherine asks for a name and an age.</thi");
    if (which == 3) g.feed("Catherine asks for a name and an age.</think>");
    std::vector<float> logits(std::size_t(n_vocab), 0.0f);
    for (auto _ : st) {
        g.mask(v, logits.data(), n_vocab, -1e30f);
        benchmark::DoNotOptimize(logits.data());
    }
    st.SetItemsProcessed(st.iterations() * n_vocab);
}

const char* const kPatterns[] = {"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$",
                                 "[A-Z][a-z]+( [a-z]+){2,12}[.!?]", nullptr};

std::string pattern(int which) {
    if (kPatterns[which]) return kPatterns[which];
    std::string choices;  // 64 words as choices, escaped as the server escapes them
    std::mt19937 gen(5);
    for (int i = 0; i < 64; ++i) {
        choices += i ? "|" : "";
        for (int k = 0, n = 3 + int(gen() % 8); k < n; ++k) choices += char('a' + gen() % 26);
    }
    return choices;
}

const serve::RegexDfa& sentence() {
    static const serve::RegexDfa d(kPatterns[2], serve::RegexDfa::Match::whole, std::bitset<256>().set());
    return d;
}

const serve::RegexDfa& four_choices() {
    static const serve::RegexDfa d("yes|no|perhaps so|Mr\\. Tilney \\(a clergyman\\)", serve::RegexDfa::Match::whole,
                                   std::bitset<256>().set());
    return d;
}

serve::RegexPrefix regex_state(int which) {
    serve::RegexPrefix p(which == 0 ? sentence() : four_choices());
    if (which == 0) p.feed("Catherine was ver");
    return p;
}

void BM_MaskRegex(benchmark::State& st) { time_mask(st, regex_state); }

/// A GBNF grammar of JSON values (recursive: objects and arrays nest).
const char* const kJsonValues = R"(root ::= obj
val ::= obj | arr | str | num | "true" | "false" | "null"
obj ::= "{" sp (str ":" sp val sp ("," sp str ":" sp val sp)*)? "}"
arr ::= "[" sp (val sp ("," sp val sp)*)? "]"
str ::= "\"" ([^"\\] | "\\" ["\\/bfnrt])* "\""
num ::= "-"? [0-9]+ ("." [0-9]+)?
sp ::= [ \n]{0,8}
)";

/// That grammar, in the JSON states above.
const serve::Grammar& json_grammar() {
    static const serve::Grammar g(kJsonValues);
    return g;
}

serve::GrammarPrefix grammar_state(int which) {
    serve::GrammarPrefix p(json_grammar());
    if (which == 1) p.feed("{\"name\": \"Catherine Morland, who");
    if (which == 2) p.feed("{\"name\": \"Catherine\", \"age\":");
    return p;
}

void BM_MaskGrammar(benchmark::State& st) { time_mask(st, grammar_state); }

/// A set of stacks' first mask: the walk of the trie (on copies of the recognizer) that fills its
/// cache entry; each iteration a fresh grammar (compiled outside the timing).
void BM_MaskGrammarFirstVisit(benchmark::State& st) {
    const int n_vocab = int(st.range(0));
    const serve::GuideVocabulary v = vocabulary(n_vocab);
    std::vector<float> logits(std::size_t(n_vocab), 0.0f);
    for (auto _ : st) {
        st.PauseTiming();
        const serve::Grammar g(R"(root ::= "{\"name\": \"" ([^"\\] | "\\" ["\\/bfnrt])* "\"}")");
        serve::GrammarPrefix p(g);
        p.feed("{\"name\": \"Catherine Morland, who");
        st.ResumeTiming();
        serve::mask_guided(p, v, logits.data(), n_vocab, -1e30f);
        benchmark::DoNotOptimize(logits.data());
    }
    st.SetItemsProcessed(st.iterations() * n_vocab);
}

/// Compiling llama.cpp-style grammars, once per request: 0 the JSON values above, 1 64 words as
/// alternatives, 2 a date-time with repetitions.
void BM_CompileGrammar(benchmark::State& st) {
    std::string source;
    if (st.range(0) == 1) {
        std::mt19937 gen(5);
        source = "root ::= ";
        for (int i = 0; i < 64; ++i) {
            source += i ? " | \"" : "\"";
            for (int k = 0, n = 3 + int(gen() % 8); k < n; ++k) source += char('a' + gen() % 26);
            source += "\"";
        }
    } else if (st.range(0) == 2) {
        source = "root ::= d{4} \"-\" d{2} \"-\" d{2} \"T\" d{2} \":\" d{2} \":\" d{2} (\".\" d{1,9})? (\"Z\" | [+-] d{2} \":\" d{2})\nd ::= [0-9]";
    }
    for (auto _ : st) {
        if (st.range(0) == 0) {
            benchmark::DoNotOptimize(serve::Grammar(kJsonValues).n_states());
        } else {
            benchmark::DoNotOptimize(serve::Grammar(source).n_states());
        }
    }
}

/// A state's first mask: the walk of the trie that fills its TokenSetCache entry (BM_MaskRegex and
/// the pattern row of BM_MaskJsonSchema time the later ones, which read the entry).
void BM_MaskRegexFirstVisit(benchmark::State& st) {
    const int n_vocab = int(st.range(0));
    const serve::GuideVocabulary v = vocabulary(n_vocab);
    const serve::RegexPrefix p = regex_state(0);
    const serve::AutomatonAt a = p.automaton();
    for (auto _ : st) {
        serve::TokenSetCache cache;
        benchmark::DoNotOptimize(cache.tokens_from(*a.dfa, a.state, v));
    }
    st.SetItemsProcessed(st.iterations() * n_vocab);
}

void BM_CompileRegex(benchmark::State& st) {
    const std::string p = pattern(int(st.range(0)));
    std::size_t states = 0;
    for (auto _ : st) {
        const serve::RegexDfa d(p, serve::RegexDfa::Match::whole, std::bitset<256>().set());
        states = d.n_states();
        benchmark::DoNotOptimize(states);
    }
    st.counters["states"] = double(states);
}

void BM_CompileFormat(benchmark::State& st) {
    const serve::JsonFormat& f = serve::json_formats()[std::size_t(st.range(0))];
    const nlohmann::ordered_json schema = {{"type", "object"},
                                           {"properties", {{"v", {{"type", "string"}, {"format", std::string(f.name)}}}}}};
    std::size_t states = 0;
    for (auto _ : st) {
        const serve::JsonSchema s(schema);
        states = s.pattern(0).n_states();
        benchmark::DoNotOptimize(states);
    }
    st.SetLabel(std::string(f.name));
    st.counters["states"] = double(states);
}

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
    const serve::GuideVocabulary v = vocabulary(n_vocab);
    const serve::JsonPrefix p = state(int(st.range(1)));
    std::vector<float> logits(std::size_t(n_vocab), 0.0f);
    for (auto _ : st) {
        mask_each_token(p, v, logits.data(), n_vocab);
        benchmark::DoNotOptimize(logits.data());
    }
    st.SetItemsProcessed(st.iterations() * n_vocab);
}

BENCHMARK(BM_MaskJson)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskJsonSchema)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2, 3, 4, 5, 6}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskJsonUnion)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskReasoning)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2, 3}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskGrammar)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskGrammarFirstVisit)->Arg(4096)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CompileGrammar)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskRegex)->ArgsProduct({{4096, 32000, 128256}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskRegexFirstVisit)->Arg(4096)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CompileRegex)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CompileFormat)->DenseRange(0, 9)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskEachToken)->ArgsProduct({{4096, 32000, 128256}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleSameVocab)->Arg(4096)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
