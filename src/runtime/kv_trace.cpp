// Decode traces (include/aqpim/kv_trace.h).
#include "aqpim/kv_trace.h"

#include <nlohmann/json.hpp>

#include "aqpim/error.h"

namespace aqpim {

namespace {
constexpr const char* kFormat = "aqpim-kv-trace";
constexpr int kVersion = 1;
}  // namespace

KvTraceWriter::KvTraceWriter(const std::string& path, const KvCache& cache, const std::string& model, int n_head)
    : cache_(cache), out_(path), path_(path) {
    AQPIM_CHECK(out_.good(), "--trace: cannot write '{}'", path);
    const KvShape& s = cache.shape();
    nlohmann::ordered_json h = {{"format", kFormat}, {"version", kVersion},     {"model", model},
                                {"scheme", cache.scheme()}, {"n_layer", s.n_layer}, {"n_head", n_head},
                                {"n_kv_head", s.n_kv_head}, {"head_dim", s.head_dim}};
    out_ << h.dump() << '\n';
}

void KvTraceWriter::record(std::int64_t step, const std::vector<int>& seq_ids) {
    for (int il = 0; il < cache_.shape().n_layer; ++il) {
        nlohmann::ordered_json r = {{"step", step}, {"layer", il}};
        auto& seqs = r["seqs"] = nlohmann::ordered_json::array();
        for (int id : seq_ids) {
            auto spans = nlohmann::ordered_json::array();
            for (const KvSpan& sp : cache_.layout(id, il)) spans.push_back({sp.first, sp.n, sp.version, sp.page});
            seqs.push_back({{"seq", id}, {"tokens", cache_.n_tokens(id, il)}, {"spans", spans}});
        }
        out_ << r.dump() << '\n';
    }
    out_.flush();
    AQPIM_CHECK(out_.good(), "--trace: writing '{}' failed", path_);
}

KvTrace read_kv_trace(const std::string& path) {
    std::ifstream in(path);
    AQPIM_CHECK(in.good(), "cannot read KV trace '{}'", path);
    KvTrace t;
    std::string line;
    std::int64_t ln = 0;
    auto fail_at = [&](const std::string& msg) { AQPIM_FAIL("{}:{}: {}", path, ln, msg); };
    while (std::getline(in, line)) {
        ++ln;
        if (line.empty()) continue;
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const std::exception& e) {
            fail_at(fmt::format("not JSON ({})", e.what()));
        }
        try {
            if (ln == 1) {
                if (j.value("format", "") != kFormat) fail_at(fmt::format("not an {} file (header 'format')", kFormat));
                if (j.at("version").get<int>() != kVersion)
                    fail_at(fmt::format("version {} (expected {})", j.at("version").get<int>(), kVersion));
                t.model = j.at("model").get<std::string>();
                t.scheme = j.at("scheme").get<std::string>();
                t.n_layer = j.at("n_layer").get<int>();
                t.n_head = j.at("n_head").get<int>();
                t.n_kv_head = j.at("n_kv_head").get<int>();
                t.head_dim = j.at("head_dim").get<int>();
                if (t.n_layer <= 0 || t.n_kv_head <= 0 || t.head_dim <= 0 || t.n_head <= 0 || t.n_head % t.n_kv_head)
                    fail_at("bad model shape in the header");
                continue;
            }
            KvTraceRecord r;
            r.step = j.at("step").get<std::int64_t>();
            r.layer = j.at("layer").get<int>();
            if (r.layer < 0 || r.layer >= t.n_layer) fail_at(fmt::format("layer {} out of range", r.layer));
            if (!t.records.empty() && r.step < t.records.back().step) fail_at("steps go backwards");
            for (const auto& s : j.at("seqs")) {
                KvTraceSequence q;
                q.seq = s.at("seq").get<int>();
                q.tokens = s.at("tokens").get<std::int64_t>();
                std::int64_t next = 0;
                for (const auto& sp : s.at("spans")) {
                    const KvSpan k{sp.at(0).get<std::int64_t>(), sp.at(1).get<std::int64_t>(), sp.at(2).get<int>(),
                                   sp.at(3).get<std::int64_t>()};
                    if (k.first != next || k.n <= 0) fail_at(fmt::format("spans of sequence {} do not tile its tokens", q.seq));
                    next = k.first + k.n;
                    q.spans.push_back(k);
                }
                if (next != q.tokens) fail_at(fmt::format("spans of sequence {} cover {} of {} tokens", q.seq, next, q.tokens));
                r.seqs.push_back(std::move(q));
            }
            t.records.push_back(std::move(r));
        } catch (const nlohmann::json::exception& e) {
            fail_at(fmt::format("missing or mistyped field ({})", e.what()));
        }
    }
    AQPIM_CHECK(ln > 0, "KV trace '{}' is empty", path);
    return t;
}

}  // namespace aqpim
