// Trace-driven workloads (include/aqpim/pim_trace.h).
#include "aqpim/pim_trace.h"

#include <algorithm>
#include <set>

#include "aqpim/error.h"

namespace aqpim {

PimTraceStep pim_trace_step(const KvTrace& trace, std::int64_t step) {
    AQPIM_CHECK(!trace.records.empty(), "the KV trace has no decode steps");
    if (step < 0) step = trace.last_step();
    PimTraceStep r;
    r.step = step;
    std::set<int> seqs;
    std::int64_t longest = 0;
    for (const KvTraceRecord& rec : trace.records) {
        if (rec.step != step) continue;
        for (const KvTraceSequence& s : rec.seqs) {
            seqs.insert(s.seq);
            std::set<int> versions, pages;
            std::int64_t uncoded = 1;  // the step's own token
            for (const KvSpan& sp : s.spans) {
                if (sp.version < 0) uncoded += sp.n;
                else {
                    versions.insert(sp.version);
                    pages.insert(int(sp.page));
                }
            }
            longest = std::max(longest, s.tokens + 1);
            r.f16_tokens = std::max(r.f16_tokens, uncoded);
            r.versions = std::max(r.versions, int(versions.size()));
            r.pages = std::max<std::int64_t>(r.pages, std::int64_t(pages.size()));
        }
    }
    AQPIM_CHECK(!seqs.empty(), "the KV trace has no step {} (steps 0..{})", step, trace.last_step());
    r.n_seqs = int(seqs.size());
    r.shape.kv_heads = std::int64_t(trace.n_layer) * trace.n_kv_head * r.n_seqs;
    r.shape.group = trace.n_head / trace.n_kv_head;
    r.shape.head_dim = trace.head_dim;
    r.shape.context = longest;
    return r;
}

}  // namespace aqpim
