// Decode traces (include/aqpim/kv_trace.h).
#include "aqpim/kv_trace.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/model.h"

namespace aqpim {

namespace {
constexpr const char* kFormat = "aqpim-kv-trace";
constexpr int kVersion = 1;
}  // namespace

KvTraceWriter::KvTraceWriter(const std::string& path, const KvCache& cache, const std::string& model, int n_head)
    : cache_(cache), out_(path, "--trace") {
    const KvShape& s = cache.shape();
    nlohmann::ordered_json h = {{"format", kFormat}, {"version", kVersion},     {"model", model},
                                {"scheme", cache.scheme()}, {"n_layer", s.n_layer}, {"n_head", n_head},
                                {"n_kv_head", s.n_kv_head}, {"head_dim", s.head_dim}};
    out_.stream() << h.dump() << '\n';
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
        out_.stream() << r.dump() << '\n';
    }
    AQPIM_CHECK(out_.stream().good(), "--trace: writing '{}' failed", out_.path());
}

KvTrace read_kv_trace(const std::string& path) {
    std::istringstream in(read_whole_file(path, "KV trace"));
    KvTrace t;
    std::string line;
    std::int64_t ln = 0;
    auto fail_at = [&](const std::string& msg) { AQPIM_FAIL("{}:{}: {}", path, ln, msg); };
    while (std::getline(in, line)) {
        ++ln;
        if (line.empty()) continue;
        const nlohmann::json j = parse_json(line, fmt::format("{}:{}", path, ln));
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
                const auto in_range = [&](const char* field, int v, int hi) {
                    if (v < 1 || v > hi) fail_at(fmt::format("header: {} = {} is out of range [1, {}]", field, v, hi));
                };
                in_range("n_layer", t.n_layer, ModelLimits::layers);
                in_range("n_head", t.n_head, ModelLimits::heads);
                in_range("n_kv_head", t.n_kv_head, ModelLimits::heads);
                in_range("head_dim", t.head_dim, ModelLimits::head_dim);
                if (t.n_head % t.n_kv_head)
                    fail_at(fmt::format("header: n_head {} is not a multiple of n_kv_head {}", t.n_head, t.n_kv_head));
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
                if (q.tokens < 0 || q.tokens >= ModelLimits::context)
                    fail_at(fmt::format("sequence {}: tokens = {} is out of range [0, {})", q.seq, q.tokens,
                                        ModelLimits::context));
                std::int64_t next = 0;
                for (const auto& sp : s.at("spans")) {
                    const KvSpan k{sp.at(0).get<std::int64_t>(), sp.at(1).get<std::int64_t>(), sp.at(2).get<int>(),
                                   sp.at(3).get<std::int64_t>()};
                    if (k.first != next || k.n <= 0 || k.n > q.tokens) fail_at(fmt::format("spans of sequence {} do not tile its tokens", q.seq));
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
