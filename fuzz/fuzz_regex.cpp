// Patterns into byte automata (serve/regex_dfa.h, docs/serve.md "Regular expressions and
// choices"). Input: PATTERN SEP TEXT. The pattern compiles as a whole-text regex and as a JSON
// Schema `pattern` (searched, JSON string bytes only); a RegexError is the expected refusal. Each
// automaton is checked: every state reachable from the start can still reach a match (the cut of
// dead ends), a final state has no transition, the JSON one has none on a byte a JSON string
// cannot hold. TEXT is read by both: a text the whole-text automaton accepts must be found by the
// searched one too (unless it holds a byte the JSON one may not read). Anything else thrown, a
// crash, a violated check or a slow compile (-timeout) is a finding.
// Seeds: AQPIM_FUZZ_WRITE_SEEDS (scripts/fuzz.sh).
#include <cstdlib>
#include <memory>

#include "fuzz_input.h"
#include "serve/json_schema.h"
#include "serve/regex_dfa.h"

namespace {

using aqpim::serve::RegexDfa;

void write_seeds(const std::filesystem::path& dir) {
    aqpim::fuzz::write_two_part_seeds(dir, "regex", {
        {"^\\d{4}-\\d{2}-\\d{2}$", "2026-12-07"},
        {"[A-Z][a-z]+( [a-z]+){1,4}[.!]", "Catherine was here."},
        {"^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$", "cath@bath.uk"},
        {"(?:yes|no|perhaps \\(so\\))", "perhaps (so)"},
        {"[^\\s\\u00e0-\\u4e00]*\\u{1F600}?.", "ab\xf0\x9f\x98\x80x"},
        {"(?<n>a|bc)+?\\x41[\\b\\t]\\cJ", "bcaA\t\n"},
        {"a\"b\\\\c\\n", "a\"b\\c\n"},
    });
}

std::unique_ptr<RegexDfa> compile(std::string_view pattern, RegexDfa::Match match, const std::bitset<256>& writable) {
    try {
        return std::make_unique<RegexDfa>(pattern, match, writable);
    } catch (const aqpim::serve::RegexError&) {
        return nullptr;
    }
}

/// The checks every automaton must pass.
void check(const RegexDfa& d, const std::bitset<256>& writable) {
    const std::size_t n = d.n_states();
    std::vector<std::uint8_t> reached(n, 0), live(n, 0);
    std::vector<std::int32_t> todo = {d.start()};
    reached[std::size_t(d.start())] = 1;
    while (!todo.empty()) {
        const std::int32_t s = todo.back();
        todo.pop_back();
        bool leads_on = false;
        for (int b = 0; b < 256; ++b) {
            const std::int32_t t = d.next(s, static_cast<unsigned char>(b));
            if (t == RegexDfa::kDead) continue;
            if (!writable[std::size_t(b)]) std::abort();  // a transition on a byte the text may not hold
            leads_on = true;
            if (!reached[std::size_t(t)]) reached[std::size_t(t)] = 1, todo.push_back(t);
        }
        if (d.final(s) && leads_on) std::abort();
    }
    std::vector<std::vector<std::int32_t>> into(n);  // backwards from the matches
    for (std::size_t s = 0; s < n; ++s)
        if (reached[s])
            for (int b = 0; b < 256; ++b)
                if (const std::int32_t t = d.next(std::int32_t(s), static_cast<unsigned char>(b)); t != RegexDfa::kDead)
                    into[std::size_t(t)].push_back(std::int32_t(s));
    for (std::size_t s = 0; s < n; ++s)
        if (reached[s] && d.accepting(std::int32_t(s))) live[s] = 1, todo.push_back(std::int32_t(s));
    while (!todo.empty()) {
        const std::int32_t t = todo.back();
        todo.pop_back();
        for (const std::int32_t s : into[std::size_t(t)])
            if (!live[std::size_t(s)]) live[std::size_t(s)] = 1, todo.push_back(s);
    }
    for (std::size_t s = 0; s < n; ++s)
        if (reached[s] && !live[s]) std::abort();  // a dead end the cut left
}

bool accepts(const RegexDfa& d, std::string_view text) {
    aqpim::serve::RegexPrefix p(d);
    return p.feed(text) && p.can_end();
}

}  // namespace

AQPIM_FUZZ_WRITES_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto parts = aqpim::fuzz::split_parts(data, size);
    const std::string_view pattern = aqpim::fuzz::part(parts, 0), text = aqpim::fuzz::part(parts, 1);
    const std::bitset<256> all = std::bitset<256>().set();
    const std::bitset<256>& json = aqpim::serve::JsonSchema::pattern_writable();
    const auto whole = compile(pattern, RegexDfa::Match::whole, all);
    const auto search = compile(pattern, RegexDfa::Match::search, json);
    if (whole) check(*whole, all);
    if (search) check(*search, json);
    bool writable_text = true;
    for (const char c : text) writable_text = writable_text && json[static_cast<unsigned char>(c)];
    // A whole match is found by a search (when the search compiled within the same limits: its
    // automaton is larger, so it alone may be refused).
    if (whole && search && writable_text && accepts(*whole, text) && !accepts(*search, text)) std::abort();
    return 0;
}
