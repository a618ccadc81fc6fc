// Reports of the retrieval measurements: the retrieval view, planted needles, end-to-end prompts
// (aqpim/retrieval.h; field names in docs/eval.md).

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>

#include "aqpim/retrieval.h"
#include "report_text.h"

namespace aqpim {
namespace {

using Json = nlohmann::ordered_json;
using report_text::aligned;

std::string percent_of(std::int64_t k, std::int64_t n) {
    return n ? fmt::format("{:.2f} ({})", 100.0 * double(k) / double(n), n) : std::string("- (0)");
}

}  // namespace

std::string retrieval_view_table(const std::vector<std::string>& names,
                                 const std::vector<const RetrievalCounter*>& counters) {
    const RetrievalCounter* first = nullptr;
    for (const RetrievalCounter* c : counters)
        if (c && !first) first = c;
    if (!first) return "retrieval view: no scheme's attention weights were read\n";
    std::string out = fmt::format(
        "retrieval view: rows whose exact attention puts >= {:.0f}% on one earlier token (not token 0); "
        "% of them where the scheme keeps that argmax and its weight within {:.0f}% (queries), by distance back\n",
        100 * first->min_weight(), 100 * first->tolerance());
    std::vector<std::string> header = {"scheme", "all", "same argmax"};
    for (const RetrievalBin& b : first->bins())
        header.push_back(b.dist_end - b.dist_begin == 1 ? std::to_string(b.dist_begin)
                                                        : fmt::format("{}-{}", b.dist_begin, b.dist_end - 1));
    std::vector<std::vector<std::string>> rows = {header};
    for (std::size_t i = 0; i < names.size(); ++i) {
        std::vector<std::string> row = {names[i]};
        if (!counters[i]) {
            row.resize(header.size(), "n/a");
        } else {
            const RetrievalBin all = counters[i]->all();
            row.push_back(percent_of(all.n_kept, all.n_queries));
            row.push_back(percent_of(all.n_argmax, all.n_queries));
            for (const RetrievalBin& b : counters[i]->bins()) row.push_back(percent_of(b.n_kept, b.n_queries));
        }
        rows.push_back(row);
    }
    out += aligned(rows);
    out += fmt::format("rows seen per scheme: {}; peaked on token 0 (attention sink): {}; on the query's own token: {}\n",
                       first->n_rows(), first->n_sink_rows(), first->n_self_rows());
    return out;
}

std::string needles_table(const std::vector<SchemeNeedles>& r) {
    std::string out =
        "planted needles on synthetic K/V (one KV head): % of queries where the scheme's weight on the needle stays "
        "within 10% of exact attention's and above 1/2 (queries), by context\n";
    std::vector<std::int64_t> contexts;
    for (const SchemeNeedles& s : r)
        for (const NeedleResult& n : s.results)
            if (std::find(contexts.begin(), contexts.end(), n.context) == contexts.end()) contexts.push_back(n.context);
    std::vector<std::string> header = {"scheme", "bits/elem", "all", "worst |dw|/w"};
    for (std::int64_t c : contexts) header.push_back(c % 1024 == 0 ? fmt::format("{}K", c / 1024) : std::to_string(c));
    std::vector<std::vector<std::string>> rows = {header};
    for (const SchemeNeedles& s : r) {
        std::vector<std::string> row = {s.spec, fmt::format("{:.3f}", s.bits_per_element)};
        if (!s.note.empty()) {
            row.resize(header.size(), "n/a");
            rows.push_back(row);
            continue;
        }
        std::int64_t n = 0, k = 0;
        double worst = 0;
        std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> per;
        for (const NeedleResult& x : s.results) {
            ++n, k += x.kept;
            auto& p = per[x.context];
            ++p.first, p.second += x.kept;
            worst = std::max(worst, std::abs(x.scheme_weight - x.exact_weight) / x.exact_weight);
        }
        row.push_back(percent_of(k, n));
        row.push_back(fmt::format("{:.4f}", worst));
        for (std::int64_t c : contexts) row.push_back(percent_of(per[c].second, per[c].first));
        rows.push_back(row);
    }
    out += aligned(rows);
    for (const SchemeNeedles& s : r)
        if (!s.note.empty()) out += fmt::format("{}: {}\n", s.spec, s.note);
    return out;
}

std::string needles_json(const std::vector<SchemeNeedles>& r) {
    Json schemes = Json::array();
    for (const SchemeNeedles& s : r) {
        Json results = Json::array();
        for (const NeedleResult& x : s.results)
            results.push_back({{"context", x.context}, {"needle_pos", x.needle_pos}, {"depth", x.depth},
                               {"target", x.target}, {"exact_weight", x.exact_weight},
                               {"scheme_weight", x.scheme_weight}, {"kept", x.kept}});
        schemes.push_back({{"spec", s.spec}, {"scheme", s.scheme}, {"bits_per_element", s.bits_per_element},
                           {"note", s.note}, {"results", results}});
    }
    return Json{{"needles", schemes}}.dump(1) + "\n";
}

std::string retrieval_table(const RetrievalReport& r) {
    std::string out = fmt::format("{} prompts; exact-match accuracy of the greedy continuation, % (prompts)\n", r.n_prompts);
    for (const bool by_depth : {false, true}) {
        if (r.schemes.empty()) break;
        const auto& cells0 = by_depth ? r.schemes[0].by_depth : r.schemes[0].by_context;
        if (cells0.empty()) continue;
        std::vector<std::string> header = {by_depth ? "by depth" : "by context", "all"};
        for (const RetrievalCell& c : cells0)
            header.push_back(by_depth ? fmt::format("{}%", c.key) : std::to_string(c.key));
        std::vector<std::vector<std::string>> rows = {header};
        for (const SchemeRetrieval& s : r.schemes) {
            std::vector<std::string> row = {s.reference ? s.spec + " (ref)" : s.spec, percent_of(s.n_correct, s.n)};
            for (const RetrievalCell& c : by_depth ? s.by_depth : s.by_context) row.push_back(percent_of(c.n_correct, c.n));
            rows.push_back(row);
        }
        out += aligned(rows);
    }
    return out;
}

std::string retrieval_json(const RetrievalReport& r, const std::vector<std::pair<std::string, std::string>>& meta) {
    Json j;
    for (const auto& [k, v] : meta) j[k] = v;
    j["n_prompts"] = r.n_prompts;
    const auto cells = [](const std::vector<RetrievalCell>& cs, const char* key) {
        Json a = Json::array();
        for (const RetrievalCell& c : cs) a.push_back({{key, c.key}, {"n", c.n}, {"n_correct", c.n_correct}, {"accuracy", c.accuracy()}});
        return a;
    };
    Json schemes = Json::array();
    for (const SchemeRetrieval& s : r.schemes)
        schemes.push_back({{"spec", s.spec}, {"scheme", s.scheme}, {"reference", s.reference}, {"n", s.n},
                           {"n_correct", s.n_correct}, {"accuracy", s.n ? double(s.n_correct) / s.n : 0.0},
                           {"by_context", cells(s.by_context, "ctx")}, {"by_depth", cells(s.by_depth, "depth_pct")},
                           {"outputs", s.outputs}});
    j["schemes"] = schemes;
    return j.dump(1) + "\n";
}

}  // namespace aqpim
