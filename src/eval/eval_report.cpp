// Reports of the quality harness: aligned text tables, JSON and CSV (field names in docs/eval.md).

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "aqpim/eval.h"
#include "report_text.h"

namespace aqpim {

namespace report_text {

namespace {
/// Display width of UTF-8 text (code points; the tables hold no wide characters).
std::size_t display_width(const std::string& s) {
    return std::size_t(std::count_if(s.begin(), s.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; }));
}

}  // namespace

/// Columns padded to their widest cell: the first left-aligned, the others right-aligned.
std::string aligned(const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> width;
    for (const auto& row : rows)
        for (std::size_t c = 0; c < row.size(); ++c) {
            if (width.size() <= c) width.push_back(0);
            width[c] = std::max(width[c], display_width(row[c]));
        }
    std::string out;
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t c = 0; c < row.size(); ++c) {
            const std::string pad(width[c] - display_width(row[c]), ' ');
            line += (c ? "  " : "") + (c == 0 ? row[c] + pad : pad + row[c]);
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        out += line + "\n";
    }
    return out;
}

/// A CSV field, quoted when it holds a separator, quote or line break (specs hold commas).
std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
}

}  // namespace report_text

namespace {

using report_text::aligned;
using report_text::csv_field;

using Json = nlohmann::ordered_json;
using Meta = std::vector<std::pair<std::string, std::string>>;

std::string csv_number(double x) { return std::isfinite(x) ? fmt::format("{:.9g}", x) : std::string(); }

std::string csv(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
    std::string out;
    for (const auto* r : {&header}) {
        for (std::size_t c = 0; c < r->size(); ++c) out += (c ? "," : "") + csv_field((*r)[c]);
        out += "\n";
    }
    for (const auto& r : rows) {
        for (std::size_t c = 0; c < r.size(); ++c) out += (c ? "," : "") + r[c];
        out += "\n";
    }
    return out;
}

std::string name_of(const std::string& spec, bool reference) { return reference ? spec + " (ref)" : spec; }

std::string mib(std::uint64_t bytes) { return fmt::format("{:.3f}", double(bytes) / (1024.0 * 1024.0)); }

std::string or_na(double x, const char* format) {
    return std::isfinite(x) ? fmt::format(fmt::runtime(format), x) : std::string("n/a");
}

Json retrieval_view_json(const RetrievalCounter& c) {
    Json bins = Json::array();
    for (const RetrievalBin& b : c.bins())
        bins.push_back({{"dist_begin", b.dist_begin}, {"dist_end", b.dist_end}, {"n_queries", b.n_queries},
                        {"n_argmax", b.n_argmax}, {"n_kept", b.n_kept}});
    const RetrievalBin all = c.all();
    return Json{{"min_weight", c.min_weight()}, {"tolerance", c.tolerance()}, {"n_rows", c.n_rows()},
                {"n_sink_rows", c.n_sink_rows()}, {"n_self_rows", c.n_self_rows()}, {"n_queries", all.n_queries},
                {"n_argmax", all.n_argmax}, {"n_kept", all.n_kept}, {"bins", bins}};
}

Json with_meta(const Meta& meta) {
    Json j;
    for (const auto& [k, v] : meta) j[k] = v;
    return j;
}

}  // namespace

// ---- quality ------------------------------------------------------------------------------------------

namespace {
bool has_needles(const QualityReport& r) {
    return std::any_of(r.schemes.begin(), r.schemes.end(), [](const SchemeQuality& q) { return q.needles_n > 0; });
}
std::string needles_cell(const SchemeQuality& q) {
    return q.needles_n > 0 ? fmt::format("{:.1f} ({}/{})", 100.0 * q.needles_kept / q.needles_n, q.needles_kept, q.needles_n)
                           : std::string("n/a");
}
}  // namespace

std::string quality_table(const QualityReport& r) {
    const bool needles = has_needles(r);
    std::vector<std::vector<std::string>> rows = {
        {"scheme", "bits/elem", "peak", "KV MiB", "PPL", "dPPL %", "mean KL", "max KL", "top-1 %", "tokens/s"}};
    if (needles) rows[0].push_back("needles %");
    for (const SchemeQuality& q : r.schemes) {
        rows.push_back({name_of(q.spec, q.reference), fmt::format("{:.3f}", q.bits_per_element),
                        fmt::format("{:.3f}", q.peak_bits_per_element), mib(q.kv_bytes),
                        fmt::format("{:.4f} ± {:.4f}", q.ppl, q.ppl_error), fmt::format("{:+.3f}", q.delta_ppl_pct),
                        fmt::format("{:.4e} ± {:.1e}", q.mean_kl, q.kl_error), fmt::format("{:.3e}", q.max_kl),
                        fmt::format("{:.2f} ± {:.2f}", 100 * q.top1, 100 * q.top1_error),
                        fmt::format("{:.1f}", q.tokens_per_s)});
        if (needles) rows.back().push_back(needles_cell(q));
    }
    return fmt::format("{} chunks of {} tokens, {} scored per scheme; KL(p_f16 || p_scheme) in nats; KV bytes of one "
                       "sequence at {} tokens (peak: the most it holds on the way there, per element at {}){}\n",
                       r.n_chunks, r.n_ctx, r.n_scored, r.n_ctx, r.n_ctx,
                       needles ? fmt::format("; needles: % of planted-needle queries at {} tokens whose weight the "
                                             "scheme keeps within 10% and above 1/2 (docs/eval.md)", r.n_ctx)
                               : std::string()) +
           aligned(rows);
}

std::string quality_json(const QualityReport& r, const Meta& meta) {
    Json j = with_meta(meta);
    j["n_ctx"] = r.n_ctx;
    j["n_chunks"] = r.n_chunks;
    j["n_text_tokens"] = r.n_text_tokens;
    j["n_scored"] = r.n_scored;
    j["kv_shape"] = {{"n_layer", r.shape.n_layer}, {"n_kv_head", r.shape.n_kv_head}, {"head_dim", r.shape.head_dim}};
    Json schemes = Json::array();
    for (const SchemeQuality& q : r.schemes) {
        Json parts = Json::object();
        for (const auto& [name, bytes] : q.kv_parts) parts[name] = bytes;
        schemes.push_back({{"spec", q.spec},
                           {"scheme", q.scheme},
                           {"reference", q.reference},
                           {"ppl", q.ppl},
                           {"ppl_error", q.ppl_error},
                           {"mean_nll", q.mean_nll},
                           {"delta_ppl_pct", q.delta_ppl_pct},
                           {"mean_kl", q.mean_kl},
                           {"kl_error", q.kl_error},
                           {"max_kl", q.max_kl},
                           {"top1", q.top1},
                           {"top1_error", q.top1_error},
                           {"bits_per_element", q.bits_per_element},
                           {"peak_bits_per_element", q.peak_bits_per_element},
                           {"kv_bytes", q.kv_bytes},
                           {"peak_kv_bytes", q.peak_kv_bytes},
                           {"kv_parts", parts},
                           {"seconds", q.seconds},
                           {"tokens_per_s", q.tokens_per_s}});
        if (q.needles_n > 0) schemes.back()["needles"] = {{"n_queries", q.needles_n}, {"n_kept", q.needles_kept}};
    }
    j["schemes"] = schemes;
    return j.dump(1) + "\n";
}

std::string quality_csv(const QualityReport& r) {
    std::vector<std::vector<std::string>> rows;
    for (const SchemeQuality& q : r.schemes)
        rows.push_back({csv_field(q.spec), csv_field(q.scheme), q.reference ? "1" : "0", std::to_string(r.n_ctx),
                        std::to_string(r.n_chunks), std::to_string(r.n_scored), csv_number(q.ppl),
                        csv_number(q.ppl_error), csv_number(q.delta_ppl_pct), csv_number(q.mean_kl),
                        csv_number(q.kl_error), csv_number(q.max_kl), csv_number(q.top1),
                        csv_number(q.bits_per_element), csv_number(q.peak_bits_per_element), std::to_string(q.kv_bytes),
                        std::to_string(q.peak_kv_bytes), csv_number(q.tokens_per_s)});
    std::vector<std::string> header = {"spec", "scheme", "reference", "n_ctx", "n_chunks", "n_scored", "ppl", "ppl_error",
                                       "delta_ppl_pct", "mean_kl", "kl_error", "max_kl", "top1", "bits_per_element",
                                       "peak_bits_per_element", "kv_bytes", "peak_kv_bytes", "tokens_per_s"};
    if (has_needles(r)) {  // with --needles only, so that the columns stay as they were without
        header.insert(header.end(), {"needles_n_queries", "needles_n_kept"});
        for (std::size_t i = 0; i < rows.size(); ++i)
            rows[i].insert(rows[i].end(), {std::to_string(r.schemes[i].needles_n), std::to_string(r.schemes[i].needles_kept)});
    }
    return csv(header, rows);
}

// ---- generation ---------------------------------------------------------------------------------------

namespace {
double decode_tokens_per_s(const GenerationReport& r, const SchemeGeneration& g) {
    return g.decode_seconds > 0 ? (r.n_generate - 1) / g.decode_seconds : 0.0;
}
}  // namespace

std::string generation_table(const GenerationReport& r) {
    std::vector<std::vector<std::string>> rows = {
        {"scheme", "bits/elem", "first divergence", "mean KL", "max KL", "top-1 %", "decode tokens/s"}};
    for (const SchemeGeneration& g : r.schemes)
        rows.push_back({name_of(g.spec, g.reference), fmt::format("{:.3f}", g.bits_per_element),
                        g.first_divergence < 0 ? std::string("none") : fmt::format("step {}", g.first_divergence),
                        fmt::format("{:.4e}", g.mean_kl), fmt::format("{:.3e}", g.max_kl),
                        fmt::format("{:.2f}", 100 * g.top1), fmt::format("{:.1f}", decode_tokens_per_s(r, g))});
    std::vector<std::vector<std::string>> windows = {{"steps"}};
    for (const SchemeGeneration& g : r.schemes) windows[0].push_back("KL " + g.spec);
    const std::size_t n_windows = r.schemes.empty() ? 0 : r.schemes[0].window_kl.size();
    for (std::size_t w = 0; w < n_windows; ++w) {
        const int b = int(w) * r.window, e = std::min(r.n_generate, b + r.window);
        std::vector<std::string> row = {fmt::format("{}-{}", b, e - 1)};
        for (const SchemeGeneration& g : r.schemes) row.push_back(fmt::format("{:.4e}", g.window_kl[w]));
        windows.push_back(row);
    }
    return fmt::format("greedy decoding of {} tokens after a {}-token prompt; every scheme teacher-forced on f16's "
                       "tokens; KL(p_f16 || p_scheme) in nats\n",
                       r.n_generate, r.n_prompt) +
           aligned(rows) + fmt::format("\nmean KL per window of {} steps\n", r.window) + aligned(windows);
}

std::string generation_json(const GenerationReport& r, const Meta& meta) {
    Json j = with_meta(meta);
    j["n_prompt"] = r.n_prompt;
    j["n_generate"] = r.n_generate;
    j["window"] = r.window;
    Json schemes = Json::array();
    for (const SchemeGeneration& g : r.schemes)
        schemes.push_back({{"spec", g.spec},
                           {"scheme", g.scheme},
                           {"reference", g.reference},
                           {"first_divergence", g.first_divergence},
                           {"mean_kl", g.mean_kl},
                           {"max_kl", g.max_kl},
                           {"top1", g.top1},
                           {"window_kl", g.window_kl},
                           {"window_top1", g.window_top1},
                           {"bits_per_element", g.bits_per_element},
                           {"kv_bytes", g.kv_bytes},
                           {"prefill_seconds", g.prefill_seconds},
                           {"decode_seconds", g.decode_seconds},
                           {"decode_tokens_per_s", decode_tokens_per_s(r, g)},
                           {"tokens", g.tokens}});
    j["schemes"] = schemes;
    return j.dump(1) + "\n";
}

std::string generation_csv(const GenerationReport& r) {
    // One row per scheme and window.
    std::vector<std::vector<std::string>> rows;
    for (const SchemeGeneration& g : r.schemes)
        for (std::size_t w = 0; w < g.window_kl.size(); ++w)
            rows.push_back({csv_field(g.spec), g.reference ? "1" : "0", std::to_string(g.first_divergence),
                            std::to_string(int(w) * r.window),
                            std::to_string(std::min(r.n_generate, int(w + 1) * r.window)), csv_number(g.window_kl[w]),
                            csv_number(g.window_top1[w]), csv_number(g.mean_kl), csv_number(g.bits_per_element)});
    return csv({"spec", "reference", "first_divergence", "step_begin", "step_end", "window_kl", "window_top1",
                "mean_kl", "bits_per_element"},
               rows);
}

// ---- fidelity -----------------------------------------------------------------------------------------

std::string fidelity_table(const FidelityReport& r) {
    std::string out = fmt::format(
        "layer {}, KV head {} (query heads {}..{}), head_dim {}, {} tokens; errors against exact attention over the "
        "recorded f32 keys and values\n",
        r.layer, r.head, r.head * r.group, (r.head + 1) * r.group - 1, r.head_dim, r.n_ctx);
    std::vector<std::vector<std::string>> summary = {{"scheme", "out rel err", "out max", "score rel rmse", "attn KL"}};
    for (const SchemeFidelity& f : r.schemes)
        summary.push_back({f.spec, fmt::format("{:.6f}", f.all.out_rel_err), fmt::format("{:.6f}", f.all.out_rel_err_max),
                           or_na(f.all.score_rel_rmse, "{:.6f}"), or_na(f.all.attn_kl, "{:.3e}")});
    out += aligned(summary);
    std::vector<std::string> names;
    std::vector<const RetrievalCounter*> counters;
    for (const SchemeFidelity& f : r.schemes) {
        names.push_back(f.spec);
        counters.push_back(f.retrieval ? &*f.retrieval : nullptr);
    }
    out += "\n" + retrieval_view_table(names, counters);
    for (const SchemeFidelity& f : r.schemes) {
        out += fmt::format("\n{} by query position{}\n", f.spec, f.probe_ok ? "" : " (weights: " + f.probe_note + ")");
        std::vector<std::vector<std::string>> rows = {
            {"positions", "rows", "out rel err", "out max", "score rel rmse", "attn KL"}};
        for (const FidelityBin& b : f.bins)
            rows.push_back({fmt::format("{}-{}", b.pos_begin, b.pos_end - 1), std::to_string(b.n_rows),
                            fmt::format("{:.6f}", b.out_rel_err), fmt::format("{:.6f}", b.out_rel_err_max),
                            or_na(b.score_rel_rmse, "{:.6f}"), or_na(b.attn_kl, "{:.3e}")});
        out += aligned(rows);
    }
    return out;
}

std::string fidelity_json(const FidelityReport& r, const Meta& meta) {
    Json j = with_meta(meta);
    j["layer"] = r.layer;
    j["head"] = r.head;
    j["group"] = r.group;
    j["head_dim"] = r.head_dim;
    j["n_ctx"] = r.n_ctx;
    j["n_probe_runs"] = r.n_probe_runs;
    j["probe_block"] = r.probe_block;
    const auto bin_json = [](const FidelityBin& b) {
        const auto num = [](double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); };
        return Json{{"pos_begin", b.pos_begin},          {"pos_end", b.pos_end},
                    {"n_rows", b.n_rows},                {"out_rel_err", b.out_rel_err},
                    {"out_rel_err_max", b.out_rel_err_max}, {"score_rel_rmse", num(b.score_rel_rmse)},
                    {"attn_kl", num(b.attn_kl)}};
    };
    Json schemes = Json::array();
    for (const SchemeFidelity& f : r.schemes) {
        Json bins = Json::array();
        for (const FidelityBin& b : f.bins) bins.push_back(bin_json(b));
        schemes.push_back({{"spec", f.spec},
                           {"scheme", f.scheme},
                           {"probe_ok", f.probe_ok},
                           {"probe_note", f.probe_note},
                           {"all", bin_json(f.all)},
                           {"bins", bins},
                           {"retrieval", f.retrieval ? retrieval_view_json(*f.retrieval) : Json(nullptr)}});
    }
    j["schemes"] = schemes;
    return j.dump(1) + "\n";
}

std::string fidelity_csv(const FidelityReport& r) {
    std::vector<std::vector<std::string>> rows;
    for (const SchemeFidelity& f : r.schemes)
        for (const FidelityBin& b : f.bins)
            rows.push_back({csv_field(f.spec), std::to_string(r.layer), std::to_string(r.head),
                            std::to_string(b.pos_begin), std::to_string(b.pos_end), std::to_string(b.n_rows),
                            csv_number(b.out_rel_err), csv_number(b.out_rel_err_max), csv_number(b.score_rel_rmse),
                            csv_number(b.attn_kl)});
    return csv({"spec", "layer", "head", "pos_begin", "pos_end", "n_rows", "out_rel_err", "out_rel_err_max",
                "score_rel_rmse", "attn_kl"},
               rows);
}

}  // namespace aqpim
