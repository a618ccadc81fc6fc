// Decode traces (include/aqpim/kv_trace.h).
#include "aqpim/kv_trace.h"

#include <nlohmann/json.hpp>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "aqpim/error.h"
#include "aqpim/json_integer.h"
#include "aqpim/file_io.h"
#include "aqpim/model.h"

namespace aqpim {

namespace {

/// An integer field, checked before conversion: nlohmann's get<int>() of a float (6.7e21) or of an
/// integer beyond the type is undefined behaviour, not an exception (found by fuzz_kv_trace).
template <class T>
T integer(const nlohmann::json& v) {
    if (!v.is_number_integer())
        throw std::invalid_argument(fmt::format("expected an integer, got {}", json_excerpt(v)));
    const std::optional<std::int64_t> x = json_integer_in(v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    if (!x) throw std::invalid_argument(fmt::format("integer {} out of range", json_excerpt(v)));
    return T(*x);
}
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
                if (integer<int>(j.at("version")) != kVersion)
                    fail_at(fmt::format("version {} (expected {})", integer<int>(j.at("version")), kVersion));
                t.model = j.at("model").get<std::string>();
                t.scheme = j.at("scheme").get<std::string>();
                t.n_layer = integer<int>(j.at("n_layer"));
                t.n_head = integer<int>(j.at("n_head"));
                t.n_kv_head = integer<int>(j.at("n_kv_head"));
                t.head_dim = integer<int>(j.at("head_dim"));
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
            r.step = integer<std::int64_t>(j.at("step"));
            r.layer = integer<int>(j.at("layer"));
            if (r.layer < 0 || r.layer >= t.n_layer) fail_at(fmt::format("layer {} out of range", r.layer));
            if (!t.records.empty() && r.step < t.records.back().step) fail_at("steps go backwards");
            for (const auto& s : j.at("seqs")) {
                KvTraceSequence q;
                q.seq = integer<int>(s.at("seq"));
                q.tokens = integer<std::int64_t>(s.at("tokens"));
                if (q.tokens < 0 || q.tokens >= ModelLimits::context)
                    fail_at(fmt::format("sequence {}: tokens = {} is out of range [0, {})", q.seq, q.tokens,
                                        ModelLimits::context));
                std::int64_t next = 0;
                for (const auto& sp : s.at("spans")) {
                    const KvSpan k{integer<std::int64_t>(sp.at(0)), integer<std::int64_t>(sp.at(1)), integer<int>(sp.at(2)),
                                   integer<std::int64_t>(sp.at(3))};
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
        } catch (const std::invalid_argument& e) {
            fail_at(fmt::format("mistyped field ({})", e.what()));
        }
    }
    AQPIM_CHECK(ln > 0, "KV trace '{}' is empty", path);
    return t;
}

}  // namespace aqpim
