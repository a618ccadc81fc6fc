#include "serve/infill_sampler.h"

#include <algorithm>
#include <cmath>

#include "serve/json_constraint.h"

namespace aqpim::serve {

void apply_infill_sampler(const InfillSampling& s, float* logits, int n_vocab, float dropped) {
    struct Candidate {
        std::int32_t id;
        double p;
        bool end, kept;
    };
    std::vector<Candidate> c;
    float mx = dropped;
    for (int i = 0; i < n_vocab; ++i)
        if (logits[i] > dropped) mx = std::max(mx, logits[i]);
    double total = 0;
    for (int i = 0; i < n_vocab; ++i)
        if (logits[i] > dropped) {
            const double p = std::exp(double(logits[i] - mx));
            const bool end = std::find(s.ends.begin(), s.ends.end(), i) != s.ends.end();
            c.push_back({i, p, end, true});
            total += p;
        }
    if (c.empty()) return;
    for (Candidate& x : c) x.p /= total;
    std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); });
    const auto apply = [&] {
        for (const Candidate& x : c)
            if (!x.kept) logits[x.id] = dropped;
    };

    double p_end = 0, p_text = 0;
    for (const Candidate& x : c) (x.end ? p_end : p_text) += x.p;
    if (3 * p_end * double(c.size()) > p_text) {  // the end is likely enough: only end tokens
        for (Candidate& x : c) x.kept = x.end;
        return apply();
    }
    // A token whose text starts another's: the likelier of the two takes both probabilities.
    const std::size_t n_merge = std::min(c.size(), kInfillMergeCandidates);
    for (std::size_t i0 = 0; i0 < n_merge; ++i0)
        for (std::size_t i1 = 0; i1 < n_merge && c[i0].kept; ++i1) {
            if (i0 == i1 || !c[i1].kept) continue;
            const std::string& t0 = s.vocabulary->text(c[i0].id);
            const std::string& t1 = s.vocabulary->text(c[i1].id);
            if (t0.empty() || t0.size() > t1.size() || t1.compare(0, t0.size(), t0) != 0) continue;
            const std::size_t dst = c[i1].p > c[i0].p ? i1 : i0, src = dst == i0 ? i1 : i0;
            c[dst].p += c[src].p;
            c[src].p = 0;
            c[src].kept = false;
        }
    // Text tokens below 0.2, then below 1 / (texts left + 1) of what is left, are dropped.
    std::size_t n_text = 0;
    double kept_p = 0;
    for (Candidate& x : c) {
        x.kept = x.kept && (x.end || x.p >= 0.2);
        if (x.kept) n_text += !x.end, kept_p += x.p;
    }
    if (n_text == 0) {
        // Nothing but an end: the end tokens in the running alone. llama.cpp forces its end-of-turn
        // token; where a ban or a constraint left none in the running, the tokens stay as the
        // merge left them.
        bool any_end = false;
        for (const Candidate& x : c) any_end = any_end || x.kept;
        if (!any_end)
            for (Candidate& x : c) x.kept = x.p > 0;
        return apply();
    }
    const double threshold = 1.0 / double(n_text + 1);
    for (Candidate& x : c) x.kept = x.kept && (x.end || x.p / kept_p >= threshold);
    apply();
}

}  // namespace aqpim::serve
