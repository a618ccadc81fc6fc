// Report tables: aligned text, JSON, CSV (tools/roofline_table.h).

#include "roofline_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"

namespace aqpim::cli {
namespace {

std::string cell_text(const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
    if (v.is_number_integer()) return fmt::format("{}", v.get<std::int64_t>());
    if (v.is_number()) {
        const double d = v.get<double>();
        if (d == std::floor(d) && std::fabs(d) < 1e15) return fmt::format("{:.0f}", d);
        if (std::fabs(d) >= 1e5 || (std::fabs(d) < 1e-3 && d != 0)) return fmt::format("{:.3e}", d);
        return fmt::format("{:.4g}", d);
    }
    return v.is_null() ? "-" : v.dump();
}

std::string csv_cell(const nlohmann::json& v) {
    std::string s = v.is_number() ? v.dump() : cell_text(v);
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

}  // namespace

void Table::add(std::vector<nlohmann::json> row) {
    AQPIM_ASSERT(row.size() == columns.size());
    rows.push_back(std::move(row));
}

std::string Table::text() const {
    std::vector<std::size_t> width(columns.size());
    for (std::size_t c = 0; c < columns.size(); ++c) {
        width[c] = columns[c].size();
        for (const auto& r : rows) width[c] = std::max(width[c], cell_text(r[c]).size());
    }
    std::string out = title + "\n";
    const auto line = [&](const auto& cell_of, const auto& is_text) {
        std::string l = " ";
        for (std::size_t c = 0; c < columns.size(); ++c) {
            const std::string s = cell_of(c);
            l += " " + (is_text(c) ? fmt::format("{:<{}}", s, width[c]) : fmt::format("{:>{}}", s, width[c]));
        }
        while (!l.empty() && l.back() == ' ') l.pop_back();
        out += l + "\n";
    };
    const auto text_column = [&](std::size_t c) { return !rows.empty() && rows[0][c].is_string(); };
    line([&](std::size_t c) { return columns[c]; }, text_column);
    for (const auto& r : rows) line([&](std::size_t c) { return cell_text(r[c]); }, text_column);
    for (const auto& n : notes) out += "  " + n + "\n";
    return out;
}

nlohmann::ordered_json Table::to_json() const {
    nlohmann::ordered_json j = {{"title", title}, {"columns", columns}, {"rows", nlohmann::ordered_json::array()}, {"notes", notes}};
    for (const auto& r : rows) {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (std::size_t c = 0; c < columns.size(); ++c) o[columns[c]] = r[c];
        j["rows"].push_back(o);
    }
    return j;
}

std::string Table::csv() const {
    std::string out;
    for (std::size_t c = 0; c < columns.size(); ++c) out += (c ? "," : "") + csv_cell(columns[c]);
    out += "\n";
    for (const auto& r : rows) {
        for (std::size_t c = 0; c < columns.size(); ++c) out += (c ? "," : "") + csv_cell(r[c]);
        out += "\n";
    }
    return out;
}

std::string Report::text() const {
    std::string out;
    for (auto it = header.begin(); it != header.end(); ++it)
        if (it.key() != "table" && it.value().is_string()) out += fmt::format("{}: {}\n", it.key(), it.value().get<std::string>());
    for (const Table& t : tables) out += "\n" + t.text();
    return out;
}

nlohmann::ordered_json Report::to_json() const {
    nlohmann::ordered_json j = header;
    j["tables"] = nlohmann::ordered_json::object();
    for (const Table& t : tables) j["tables"][t.name] = t.to_json();
    return j;
}

std::string Report::csv() const {
    std::string out;
    for (const Table& t : tables) out += fmt::format("# {}: {}\n", t.name, t.title) + t.csv();
    return out;
}

}  // namespace aqpim::cli
