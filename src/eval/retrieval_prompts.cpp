// Retrieval prompts: the JSONL format of `aqpim eval --retrieval` and the copy-prompt generator
// (aqpim/retrieval.h, docs/eval.md).

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/retrieval.h"

namespace aqpim {
namespace {

/// Words of the facts: common English nouns a small model has seen, so that copying them is possible.
const std::vector<std::string>& fact_words() {
    static const std::vector<std::string> words = {
        "apple",  "river",  "garden", "window", "candle", "horse",  "silver", "forest", "letter", "bridge",
        "orange", "winter", "summer", "basket", "castle", "mirror", "pepper", "ribbon", "saddle", "temple",
        "valley", "wagon",  "anchor", "barrel", "carpet", "dragon", "feather", "glove", "hammer", "island",
        "jacket", "kettle", "ladder", "meadow", "needle", "oyster", "parrot", "rabbit", "shovel", "tunnel",
        "violin", "walnut", "cherry", "copper", "lantern", "marble", "pillow", "quarry", "rocket", "spider"};
    return words;
}

constexpr const char* kFactLead = "The secret words are:";

std::string join_words(const std::vector<std::string>& w, std::size_t begin, std::size_t end) {
    std::string s;
    for (std::size_t i = begin; i < end; ++i) s += (s.empty() ? "" : " ") + w[i];
    return s;
}

}  // namespace

std::vector<RetrievalPrompt> parse_retrieval_jsonl(const std::string& text, const std::string& source) {
    std::vector<RetrievalPrompt> out;
    std::size_t begin = 0;
    for (int line_no = 1; begin <= text.size(); ++line_no) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + begin, end - begin);
        begin = end + 1;
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
        if (line.empty()) continue;
        const std::string where = fmt::format("{} line {}", source, line_no);
        const nlohmann::json j = parse_json(line, where);
        AQPIM_CHECK(j.is_object(), "{}: expected a JSON object {{\"prompt\": ..., \"expected\": ...}}, got {}", where,
                    json_excerpt(j));
        RetrievalPrompt p;
        for (const char* key : {"prompt", "expected"}) {
            AQPIM_CHECK(j.contains(key), "{}: missing \"{}\"", where, key);
            AQPIM_CHECK(j[key].is_string(), "{}: \"{}\" must be a string, got {}", where, key, json_excerpt(j[key]));
        }
        p.prompt = j["prompt"].get<std::string>();
        p.expected = j["expected"].get<std::string>();
        AQPIM_CHECK(p.expected.find_first_not_of(" \t\r\n") != std::string::npos,
                    "{}: \"expected\" is empty (nothing to match)", where);
        if (j.contains("depth")) {
            const auto& d = j["depth"];
            AQPIM_CHECK(d.is_number() && d.get<double>() >= 0 && d.get<double>() <= 1,
                        "{}: \"depth\" must be a number in [0, 1], got {}", where, json_excerpt(d));
            p.depth = d.get<double>();
        }
        if (j.contains("ctx")) {
            const auto& c = j["ctx"];
            AQPIM_CHECK(c.is_number_integer() && c.get<std::int64_t>() >= 1 && c.get<std::int64_t>() <= (1 << 24),
                        "{}: \"ctx\" must be an integer in [1, {}], got {}", where, 1 << 24, json_excerpt(c));
            p.ctx = c.get<std::int64_t>();
        }
        out.push_back(std::move(p));
    }
    AQPIM_CHECK(!out.empty(), "{}: no prompts (one JSON object per line)", source);
    return out;
}

std::string retrieval_prompt_json(const RetrievalPrompt& p) {
    nlohmann::ordered_json j{{"prompt", p.prompt}, {"expected", p.expected}};
    if (p.ctx >= 1) j["ctx"] = p.ctx;
    if (p.depth >= 0) j["depth"] = p.depth;
    return j.dump();
}

std::vector<RetrievalPrompt> generate_retrieval_prompts(const std::string& filler,
                                                        const std::function<std::int64_t(const std::string&)>& count_tokens,
                                                        const RetrievalGenOptions& options) {
    std::vector<std::string> words;
    for (std::size_t i = 0; i < filler.size();) {
        const std::size_t b = filler.find_first_not_of(" \t\r\n", i);
        if (b == std::string::npos) break;
        const std::size_t e = std::min(filler.find_first_of(" \t\r\n", b), filler.size());
        words.push_back(filler.substr(b, e - b));
        i = e;
    }
    AQPIM_CHECK(words.size() >= 64, "retrieval prompts: the filler text has {} words (need >= 64)", words.size());
    AQPIM_CHECK(options.span_words >= 2 && options.span_words <= int(fact_words().size()),
                "retrieval prompts: {} words per fact (need 2..{})", options.span_words, fact_words().size());
    AQPIM_CHECK(options.per_cell >= 1, "retrieval prompts: {} prompts per cell (need >= 1)", options.per_cell);
    for (double d : options.depths) AQPIM_CHECK(d >= 0 && d <= 1, "retrieval prompts: depth {} (need 0..1)", d);
    AQPIM_CHECK(!options.contexts.empty() && !options.depths.empty(), "retrieval prompts: no contexts or depths");

    // mt19937_64's sequence is fixed by the standard (distributions are not): indices by modulo.
    std::mt19937_64 rng(options.seed);
    const auto pick = [&](std::size_t n) { return std::size_t(rng() % n); };
    const std::string sample = join_words(words, 0, std::min<std::size_t>(words.size(), 400));
    const double tokens_per_word =
        std::max(0.1, double(count_tokens(sample)) / double(std::min<std::size_t>(words.size(), 400)));

    std::vector<RetrievalPrompt> out;
    for (std::int64_t ctx : options.contexts)
        for (double depth : options.depths)
            for (int i = 0; i < options.per_cell; ++i) {
                std::vector<std::string> pool = fact_words(), fact;
                for (int w = 0; w < options.span_words; ++w) {
                    const std::size_t k = pick(pool.size());
                    fact.push_back(pool[k]);
                    pool.erase(pool.begin() + std::ptrdiff_t(k));
                }
                const std::size_t half = fact.size() / 2;
                const std::string fact_text = std::string(kFactLead) + " " + join_words(fact, 0, fact.size()) + ".";
                const std::string question = std::string(kFactLead) + " " + join_words(fact, 0, half);
                const std::size_t offset = pick(words.size());
                const auto build = [&](std::int64_t n_filler) {
                    std::vector<std::string> f;
                    for (std::int64_t k = 0; k < n_filler; ++k) f.push_back(words[(offset + std::size_t(k)) % words.size()]);
                    const std::size_t before = std::size_t(std::llround(depth * double(n_filler)));
                    std::string s = join_words(f, 0, before);
                    s += (s.empty() ? "" : " ") + fact_text;
                    const std::string after = join_words(f, before, f.size());
                    if (!after.empty()) s += " " + after;
                    return s + "\n" + question;
                };
                // Filler words fitted so that the prompt is at most ctx tokens (BOS included).
                const std::int64_t fixed = count_tokens(fact_text + "\n" + question) + 1;
                std::int64_t n_filler = std::max<std::int64_t>(0, std::int64_t(double(ctx - fixed) / tokens_per_word));
                std::string prompt = build(n_filler);
                for (int it = 0; it < 40 && n_filler > 0; ++it) {
                    const std::int64_t over = count_tokens(prompt) + 1 - ctx;
                    if (over <= 0) break;
                    n_filler = std::max<std::int64_t>(0, n_filler - std::max<std::int64_t>(1, std::int64_t(double(over) / tokens_per_word)));
                    prompt = build(n_filler);
                }
                RetrievalPrompt p;
                p.prompt = prompt;
                p.expected = " " + join_words(fact, half, fact.size());
                p.ctx = ctx;
                p.depth = depth;
                out.push_back(std::move(p));
            }
    return out;
}

}  // namespace aqpim
