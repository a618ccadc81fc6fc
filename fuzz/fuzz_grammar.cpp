// GBNF grammars (serve/grammar.h, docs/serve.md "Grammars"). Input: GRAMMAR SEP TEXT. The grammar
// compiles (a GrammarError is the expected refusal) and TEXT is read whole and cut in two at
// every place up to 64 bytes: each way must read the same (the same prefix verdict, the same
// end), and a text that is complete must be able to end. Anything else thrown, a crash, a violated
// check or a slow compile or read (-timeout: the bounds on states, empty paths and stacks are
// what keep a hostile grammar fast) is a finding.
// Seeds: AQPIM_FUZZ_WRITE_SEEDS (scripts/fuzz.sh).
#include <cstdlib>
#include <memory>

#include "fuzz_input.h"
#include "serve/grammar.h"

namespace {

using aqpim::serve::Grammar;
using aqpim::serve::GrammarPrefix;

void write_seeds(const std::filesystem::path& dir) {
    aqpim::fuzz::write_two_part_seeds(dir, "grammar", {
        {"root ::= object\nobject ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\" ws\npair ::= string \":\" ws value\n"
         "value ::= object | \"[\" ws (value (\",\" ws value)*)? \"]\" ws | string | [0-9]+ ws\n"
         "string ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [\"\\\\nt])* \"\\\"\" ws\nws ::= [ \\t\\n]{0,4}\n",
         "{\"a\": [1, {\"b\": \"x\\n\"}]}"},
        {"root ::= (\"(\" root \")\" | \"x\")*", "((x)x)"},
        {"root ::= word (\" \" word){2,5} [.!]  # a sentence\nword ::= [A-Za-z\\u00e0-\\u00ff]+", "Catherine was h\xc3\xa9re."},
        {"root ::= a b?\na ::= \"\" | \"a\" a\nb ::= .{0,3} \"\\x41\"", "aaxyA"},
        {"root ::= [^\\]\\n]{1,8}\n\n# comment\nunused ::= \"q\"", "ab]"},
    });
}

struct Read {
    bool prefix, can_end, complete;
    bool operator==(const Read&) const = default;
};

Read read(const Grammar& g, std::string_view a, std::string_view b) {
    GrammarPrefix p(g);
    const bool prefix = p.feed(a) && p.feed(b);
    return {prefix, prefix && p.can_end(), prefix && p.complete()};
}

}  // namespace

AQPIM_FUZZ_WRITES_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto parts = aqpim::fuzz::split_parts(data, size);
    const std::string_view source = aqpim::fuzz::part(parts, 0), text = aqpim::fuzz::part(parts, 1);
    std::unique_ptr<Grammar> g;
    try {
        g = std::make_unique<Grammar>(source);
    } catch (const aqpim::serve::GrammarError&) {
        return 0;
    }
    const Read whole = read(*g, text, "");
    if (whole.complete && !whole.can_end) std::abort();
    for (std::size_t cut = 1; cut < text.size() && cut <= 64; ++cut)
        if (!(read(*g, text.substr(0, cut), text.substr(cut)) == whole)) std::abort();
    return 0;
}
